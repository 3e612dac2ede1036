//go:build unix

package cmdline

import (
	"os/exec"
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
