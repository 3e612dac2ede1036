package etcdlock

import (
	"strings"
	"testing"

	"github.com/gpuexec/gpuexec/lock"
)

// No lock's keys are under another lock's prefix, whatever names users
// choose: a lock and one whose name is the first's followed by a character
// that a key layout could have used as its separator (and did: "/") are two
// locks, in both orders. While the one holds, the other's status is free,
// a forced clear of the other touches nothing of it, and the other is taken
// at once (TryAcquire: nobody holds it or queues for it); clearing the
// other's holder by force then leaves the one held.
func TestLocksWhoseNamesExtendAnotherAreApart(t *testing.T) {
	srv := sharedEtcd(t)
	for _, sep := range []string{"/", "-", "_", ".", ":", "~", "+", "=", ",", ";", "@", "!", "0"} {
		short := key(t) + "/box" + strings.NewReplacer("/", "slash", ".", "dot").Replace(sep)
		long := short + sep + "gpu0"
		for _, c := range []struct{ first, second string }{{long, short}, {short, long}} {
			name := "holding " + strings.TrimPrefix(c.first, key(t)) + ", then " + strings.TrimPrefix(c.second, key(t))
			t.Run(name, func(t *testing.T) {
				first := lock.Options{Path: srv.URL(c.first, "ttl=5s"), Owner: "first", Slug: "job"}
				second := lock.Options{Path: srv.URL(c.second, "ttl=5s"), Owner: "second", Slug: "job"}
				h1 := acquire(t, first)
				stillHeld := func(when string) {
					t.Helper()
					if st := statusOf(t, first); st.State != lock.StateHeld || st.Info == nil || st.Info.Token != h1.Info().Token {
						t.Fatalf("%s: %s is %+v, want still held by its first holder", when, c.first, st)
					}
				}
				if st := statusOf(t, second); st.State != lock.StateFree {
					t.Fatalf("status of %s while only %s is held: %s, want free", c.second, c.first, st.Holder())
				}
				if st, err := (Backend{}).Clear(second, true); err != nil || st.State != lock.StateFree {
					t.Fatalf("clear --force of %s while only %s is held: %+v, %v; want free, nothing cleared", c.second, c.first, st, err)
				}
				stillHeld("after a forced clear of " + c.second)
				h2, err := Backend{}.TryAcquire(second)
				if err != nil {
					t.Fatalf("TryAcquire of %s while only %s is held: %v", c.second, c.first, err)
				}
				defer h2.Release()
				if st := statusOf(t, second); st.State != lock.StateHeld || st.Info == nil || st.Info.Token != h2.Info().Token {
					t.Fatalf("status of %s: %+v, want its own holder", c.second, st)
				}
				if st, err := (Backend{}).Clear(second, true); err != nil || st.Info == nil || st.Info.Token != h2.Info().Token {
					t.Fatalf("clear --force of %s: %+v, %v; want its own holder cleared", c.second, st, err)
				}
				waitFor(t, "the cleared holder to lose its lock", func() bool {
					select {
					case <-h2.Lost():
						return true
					default:
						return false
					}
				})
				stillHeld("after a forced clear of " + c.second + "'s holder")
				select {
				case <-h1.Lost():
					t.Errorf("%s lost: %v", c.first, h1.LostReason())
				default:
				}
			})
		}
	}
}
