package etcdhelper

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpuexec/gpuexec/lock"
)

// fill sets every exported field of the value v points to, recursively, to
// something other than its zero value.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 10, 12, 12, 18, 3, 512_000_000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i))
		}
	case reflect.Map:
		if v.Type() != reflect.TypeFor[map[string]any]() {
			t.Fatalf("no filler for %s", v.Type())
		}
		v.Set(reflect.ValueOf(map[string]any{"extra": "kept"}))
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(7)
	default:
		t.Fatalf("no filler for %s", v.Type())
	}
}

func filled[T any](t *testing.T) *T {
	var v T
	fill(t, reflect.ValueOf(&v).Elem())
	return &v
}

// Every exported field of what package lock returns crosses the wire: a
// field added there fails here until the wire types carry it.
func TestWireCarriesEveryField(t *testing.T) {
	info := filled[lock.Info](t)
	if got := toWireInfo(info).lock(); !reflect.DeepEqual(got, info) {
		t.Errorf("lock.Info across the wire:\n got %+v\nwant %+v", got, info)
	}
	st := filled[lock.Status](t)
	if got := toWireStatus(st).lock(); !reflect.DeepEqual(got, st) {
		t.Errorf("lock.Status across the wire:\n got %+v\nwant %+v", got, st)
	}
	r := filled[lock.Report](t)
	if got := toWireReport(r).lock(); !reflect.DeepEqual(got, r) {
		t.Errorf("lock.Report across the wire:\n got %+v\nwant %+v", got, r)
	}
	for _, nothing := range []*lock.Report{nil, {}, {Locks: []*lock.Status{}, Queue: []lock.Waiter{}}} {
		if got := toWireReport(nothing).lock(); !reflect.DeepEqual(got, nothing) {
			t.Errorf("%#v across the wire: %#v", nothing, got)
		}
	}
}

// A job group's doubt crosses the wire as protocol 3's sentence and comes
// back typed; one in another form is still a doubt, its uids untold.
func TestWireDoubt(t *testing.T) {
	st := &lock.Status{State: lock.StateHeld, JobGroup: 4250, JobGroupDoubt: &lock.ForeignGroup{RecordUID: 1001, GroupUID: 0}}
	w := toWireStatus(st)
	if want := "its record is uid 1001's but names process group 4250, which runs as uid 0"; w.JobGroupDoubt != want {
		t.Errorf("on the wire: %q, want %q", w.JobGroupDoubt, want)
	}
	if got := w.lock().JobGroupDoubt; got == nil || *got != *st.JobGroupDoubt {
		t.Errorf("back: %+v", got)
	}
	w.JobGroupDoubt = "some other words"
	if got := w.lock().JobGroupDoubt; got == nil || got.RecordUID != -1 || got.GroupUID != -1 {
		t.Errorf("a doubt in another form: %+v, want one with uids -1", got)
	}
	w.JobGroupDoubt = ""
	if got := w.lock().JobGroupDoubt; got != nil {
		t.Errorf("no doubt: %+v", got)
	}
}
