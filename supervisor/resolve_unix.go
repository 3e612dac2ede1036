//go:build unix

package supervisor

// foundNotExecutable reports whether name, which exec.LookPath did not
// find, names something that exists but cannot be run. On Unix LookPath
// already tells that case apart (permission denied, a folder).
func foundNotExecutable(string) bool { return false }
