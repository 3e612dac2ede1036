//go:build unix

package cmdline

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var unixCases = []struct {
	argv []string
	want string
}{
	{[]string{"echo", "I am on the GPU"}, `echo 'I am on the GPU'`},
	{[]string{"echo", "I", "am", "on", "the", "GPU"}, `echo I am on the GPU`},
	{[]string{"python3", "train.py", "--lr=0.1", "--out", "/data/run-1/ckpt,@%+:_"}, `python3 train.py --lr=0.1 --out /data/run-1/ckpt,@%+:_`},
	{[]string{"sh", "-c", "echo it's $HOME"}, `sh -c 'echo it'\''s $HOME'`},
	{[]string{"printf", ""}, `printf ''`},
	{[]string{"a'b", "'", "''"}, `'a'\''b' ''\''' ''\'''\'''`},
	{[]string{"echo", "*", "~", "#x", "a;b", "a|b", "a&b", "(x)", "`x`", `"x"`, `a\b`, "{a,b}", "!"}, `echo '*' '~' '#x' 'a;b' 'a|b' 'a&b' '(x)' '` + "`x`" + `' '"x"' 'a\b' '{a,b}' '!'`},
	{[]string{"echo", "two\nlines", "tab\there", "é"}, "echo 'two\nlines' 'tab\there' 'é'"},
	{[]string{"FOO=bar", "x=y"}, `'FOO=bar' x=y`},
}

func TestLine(t *testing.T) {
	for _, tc := range unixCases {
		if got := Line(tc.argv); got != tc.want {
			t.Errorf("Line(%q)\n got %s\nwant %s", tc.argv, got, tc.want)
		}
	}
}

// Each line, run by sh, gives its command the arguments it was made of.
func TestLineReadBackBySh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, tc := range unixCases {
		// printf prints each argument on a line of its own, between
		// brackets, whatever the command's name was.
		line := "printf '[%s]\\n' " + Line(tc.argv)
		out, err := exec.Command(sh, "-c", line).Output()
		if err != nil {
			t.Errorf("sh -c %q: %v", line, err)
			continue
		}
		var got []string
		for _, l := range strings.SplitAfter(string(out), "]\n") {
			if l != "" {
				got = append(got, strings.TrimSuffix(strings.TrimPrefix(l, "["), "]\n"))
			}
		}
		if !reflect.DeepEqual(got, tc.argv) {
			t.Errorf("sh read %s back as %q, want %q", Line(tc.argv), got, tc.argv)
		}
	}
}

// A command named as a shell's reserved word (time, if, ...) is quoted,
// so that a shell runs that command rather than reading the word: bash
// reads `time -v python train.py` as its time keyword timing the command
// -v ("-v: command not found"), not as /usr/bin/time -v.
func TestLineQuotesAReservedWordAsTheCommand(t *testing.T) {
	for _, w := range []string{"time", "if", "while", "for", "case", "until", "select", "function", "coproc", "then", "do", "done", "fi", "esac", "elif", "else", "in"} {
		if got, want := Line([]string{w, "-v", "x"}), "'"+w+"' -v x"; got != want {
			t.Errorf("Line(%q) = %s, want %s", []string{w, "-v", "x"}, got, want)
		}
	}
	if got := Line([]string{"echo", "time", "if"}); got != "echo time if" {
		t.Errorf("Line(echo time if) = %s: an argument that is not the command stays bare", got)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	// A command named time, found on PATH, prints its arguments.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "time"), []byte("#!/bin/sh\necho \"ran $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	line := Line([]string{"time", "-v", "x"})
	cmd := exec.Command(bash, "-c", line)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "ran -v x\n" {
		t.Errorf("bash -c %q: %q, %v; want the command time run with -v x", line, out, err)
	}
}
