//go:build windows

package lock

// describeFolder says nothing more on Windows: the error from the system
// already names what is denied.
func describeFolder(string) string { return "" }

// folderGroup: Windows folders have no group here (see FolderError).
func folderGroup(string) string { return "?" }
