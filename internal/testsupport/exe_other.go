//go:build !windows

package testsupport

// exeSuffix ends the name of a binary Build writes.
const exeSuffix = ""
