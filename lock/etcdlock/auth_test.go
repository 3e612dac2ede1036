package etcdlock

// TLS and authentication against a real etcd (see etcd_test.go).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/internal/etcdtest"
	"github.com/gpuexec/gpuexec/internal/testsupport"
	"github.com/gpuexec/gpuexec/lock"
)

func TestTLS(t *testing.T) {
	files := etcdtest.NewTLSFiles(t, t.TempDir())
	srv := etcdtest.Start(t, etcdtest.WithTLS(files))
	q := "cacert=" + files.CA + "&cert=" + files.ClientCert + "&key=" + files.ClientKey
	h := acquire(t, lock.Options{Path: srv.URL("gpuexec/tls", q)})
	if st := statusOf(t, lock.Options{Path: srv.URL("gpuexec/tls", q)}); st.State != lock.StateHeld {
		t.Errorf("%+v", st)
	}
	h.Release()
	// Without the client certificate the server refuses; without TLS it
	// does not answer.
	for _, q := range []string{"cacert=" + files.CA + "&dial-timeout=1s", "dial-timeout=1s"} {
		if _, err := (Backend{}).Inspect(lock.Options{Path: srv.URL("gpuexec/tls", q)}); err == nil {
			t.Errorf("%s: no error", q)
		}
	}
}

func TestAuth(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t, "", "")
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	os.WriteFile(bad, []byte("wrong\n"), 0o600)
	// Renewals carry the credentials too: the lock outlives its TTL.
	h := acquire(t, lock.Options{Path: srv.URL("gpuexec/auth", "ttl=2s&user=root&password-file="+good)})
	testsupport.StillBlocked(t, 3*time.Second, "the holder lost the lock", func() bool { return h.(*Held).LostReason() != nil })
	h.Release()
	_, err := Backend{}.Inspect(lock.Options{Path: srv.URL("gpuexec/auth", "user=root&password-file="+bad+"&dial-timeout=2s")})
	if err == nil || errors.Is(err, lock.ErrUnreachable) || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("wrong password: %v, want an authentication error", err)
	}
	_, err = Backend{}.Inspect(lock.Options{Path: srv.URL("gpuexec/auth", "dial-timeout=2s")})
	if err == nil {
		t.Error("no credentials: no error")
	}
}
