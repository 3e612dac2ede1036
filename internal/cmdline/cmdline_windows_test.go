//go:build windows

package cmdline

import "testing"

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"echo", "I am on the GPU"}, `echo "I am on the GPU"`},
		{[]string{"python", "train.py", "--lr=0.1"}, `python train.py --lr=0.1`},
		{[]string{"cmd", ""}, `cmd ""`},
		{[]string{`C:\Program Files\app.exe`, `say "hi"`, `a\\"b`, `dir\`}, `"C:\Program Files\app.exe" "say \"hi\"" "a\\\\\"b" dir\`},
	} {
		if got := Line(tc.argv); got != tc.want {
			t.Errorf("Line(%q)\n got %s\nwant %s", tc.argv, got, tc.want)
		}
	}
}
