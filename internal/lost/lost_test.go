package lost

import (
	"context"
	"errors"
	"testing"
)

func TestSignal(t *testing.T) {
	l := New()
	select {
	case <-l.Lost():
		t.Fatal("Lost closed before Mark")
	default:
	}
	if l.Reason() != nil {
		t.Fatal("a reason before Mark")
	}
	first, second := errors.New("first"), errors.New("second")
	announced := 0
	l.Mark(first, func() {
		announced++
		select {
		case <-l.Lost():
			t.Error("Lost closed before the announcement")
		default:
		}
		if l.Reason() != nil {
			t.Error("a reason before Lost is closed")
		}
	})
	l.Mark(second, func() { announced++ })
	l.Mark(second, nil)
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after Mark")
	}
	if announced != 1 || l.Reason() != first {
		t.Fatalf("announced %d times, reason %v; want once, %v", announced, l.Reason(), first)
	}
}

// A nil reason still closes Lost, and Reason is then not nil.
func TestSignalWithoutReason(t *testing.T) {
	l := New()
	l.Mark(nil, nil)
	<-l.Lost()
	if !errors.Is(l.Reason(), context.Canceled) {
		t.Fatalf("reason %v; want context.Canceled", l.Reason())
	}
}
