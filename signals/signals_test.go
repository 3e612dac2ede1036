package signals

import (
	"os"
	"syscall"
	"testing"
)

func TestExitStatus(t *testing.T) {
	tests := []struct {
		sig  os.Signal
		want int
		name string
	}{
		{os.Interrupt, 130, "SIGINT"},
		{syscall.SIGINT, 130, "SIGINT"},
		{syscall.SIGTERM, 143, "SIGTERM"},
		{syscall.SIGKILL, 137, "SIGKILL"},
	}
	for _, tt := range tests {
		if got := ExitStatus(tt.sig); got != tt.want {
			t.Errorf("ExitStatus(%v) = %d, want %d", tt.sig, got, tt.want)
		}
		if got := Name(tt.sig); got != tt.name {
			t.Errorf("Name(%v) = %q, want %q", tt.sig, got, tt.name)
		}
	}
}
