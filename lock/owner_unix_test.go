//go:build unix

package lock

import (
	"os/user"
	"testing"
)

func TestLoginName(t *testing.T) {
	want := "uid"
	if u, err := user.Current(); err == nil {
		want = u.Username
	}
	tests := []struct {
		name, user, logname, want string
	}{
		{"USER wins", "alice", "bob", "alice"},
		{"LOGNAME when no USER (cron)", "", "bob", "bob"},
		{"passwd when neither (systemd)", "", "", want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("USER", tt.user)
			t.Setenv("LOGNAME", tt.logname)
			if got := loginName(); got != tt.want {
				t.Fatalf("loginName() = %q, want %q", got, tt.want)
			}
		})
	}
}
