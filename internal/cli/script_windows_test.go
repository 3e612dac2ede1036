package cli

import "testing"

// TestScripts runs no script on Windows: their jobs are sh commands, their
// expected output has Unix paths and signals, and under Wine (winetest/run)
// no go command builds the binary. The Go tests of the CLI run there.
func TestScripts(t *testing.T) {
	t.Skip("the scripts need sh, Unix paths and a go command; the CLI's Go tests cover Windows")
}
