//go:build !linux

package proc

// RunOf is whether pid can run: Gone when it is gone, else RunUnknown:
// this OS's process table is not read for a stopped state here.
func RunOf(pid int) Run {
	if !Alive(pid) {
		return Gone
	}
	return RunUnknown
}

// GroupRun is whether process group pgid, made by a job whose leader
// started at since (0: not known), can run: Gone when GroupAliveSince
// finds no member, else RunUnknown.
func GroupRun(pgid int, since int64) Run {
	if !GroupAliveSince(pgid, since) {
		return Gone
	}
	return RunUnknown
}
