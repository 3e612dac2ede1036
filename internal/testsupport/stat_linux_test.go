package testsupport

import (
	"os"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Stat
		ok   bool
	}{
		{"42 (sleep) S 1 42 42 0 -1 4194304", Stat{'S', 1, 42, "sleep"}, true},
		{"42 (a) b (c)) Z 7 8 9", Stat{'Z', 7, 8, "a) b (c)"}, true},
		{"42 (with space) T 3 4", Stat{'T', 3, 4, "with space"}, true},
		{"42 (x) S 1", Stat{}, false},
		{"42 (x) SS 1 2", Stat{}, false},
		{"42 x S 1 2", Stat{}, false},
		{"42 (x) S one 2", Stat{}, false},
	} {
		got, ok := parseStat([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestProcStatOfThisProcess(t *testing.T) {
	st, ok := ProcStat(os.Getpid())
	if !ok || st.PPID != os.Getppid() || st.PGRP != syscall.Getpgrp() || st.State == 'Z' || st.Comm == "" {
		t.Fatalf("ProcStat(self) = %+v, %v; want parent %d, group %d", st, ok, os.Getppid(), syscall.Getpgrp())
	}
}
