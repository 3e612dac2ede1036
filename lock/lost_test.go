package lock

import (
	"errors"
	"testing"
)

func TestLostSignal(t *testing.T) {
	l := NewLostSignal()
	select {
	case <-l.Lost():
		t.Fatal("Lost closed before MarkLost")
	default:
	}
	if l.LostReason() != nil {
		t.Fatal("a reason before MarkLost")
	}
	first, second := errors.New("first"), errors.New("second")
	announced := 0
	l.MarkLost(first, func() {
		announced++
		select {
		case <-l.Lost():
			t.Error("Lost closed before the announcement")
		default:
		}
	})
	l.MarkLost(second, func() { announced++ })
	l.MarkLost(second, nil)
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after MarkLost")
	}
	if announced != 1 || l.LostReason() != first {
		t.Fatalf("announced %d times, reason %v; want once, %v", announced, l.LostReason(), first)
	}
}
