package etcdoptions

import (
	"errors"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

func TestCheck(t *testing.T) {
	u, err := Check(lock.Options{Path: "etcd://127.0.0.1:2379/gpuexec/box?ttl=30s"})
	if err != nil || u.Key != "/gpuexec/box" || u.TTL != 30*time.Second {
		t.Fatalf("Check: %+v, %v", u, err)
	}
	for _, tc := range []struct {
		o      lock.Options
		option string
	}{
		{lock.Options{}, "path"},
		{lock.Options{Path: "etcd://127.0.0.1:2379"}, "path"},
		{lock.Options{Path: "etcd://127.0.0.1:2379/k", Devices: []string{"0"}}, "devices"},
		{lock.Options{Path: "etcd://127.0.0.1:2379/k", Heartbeat: -time.Second}, "heartbeat"},
	} {
		_, err := Check(tc.o)
		var oe *lock.OptionError
		if !errors.As(err, &oe) || oe.Option != tc.option {
			t.Errorf("Check(%+v) = %v; want an OptionError for %s", tc.o, err, tc.option)
		}
	}
}
