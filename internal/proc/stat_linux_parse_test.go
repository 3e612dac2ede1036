//go:build linux

package proc

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " " + strings.Repeat("0 ", 40) // the fields after the session
	for _, tc := range []struct {
		in   string
		want Stat
		ok   bool
	}{
		{"42 (sleep) S 1 42 5" + tail, Stat{'S', 1, 42, 5, ""}, true},
		{"42 (a) b (c)) Z 7 8 8" + tail, Stat{'Z', 7, 8, 8, ""}, true},
		{"42 (with space) T 3 4 1" + tail, Stat{'T', 3, 4, 1, ""}, true},
		{"42 (x) S 1", Stat{}, false},
		{"42 (x) SS 1 2" + tail, Stat{}, false},
		{"42 x S 1 2" + tail, Stat{}, false},
		{"42 ) (x S 1 2" + tail, Stat{}, false},
		{"42 (x) S one 2 3" + tail, Stat{}, false},
		{"42 (x) S 1 2 three" + tail, Stat{}, false},
	} {
		got, ok := parseStat([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadStatOfThisProcess(t *testing.T) {
	st, ok := ReadStat(os.Getpid())
	if !ok || st.PPID != os.Getppid() || st.PGRP != syscall.Getpgrp() || st.State == 'Z' || st.Comm == "" {
		t.Fatalf("ReadStat(self) = %+v, %v; want parent %d, group %d", st, ok, os.Getppid(), syscall.Getpgrp())
	}
}
