package lost

import (
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
