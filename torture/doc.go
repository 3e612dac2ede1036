// Package torture holds the tests that try hard to break gpuexec's
// guarantees (see "Guarantees" in README.md): a crash storm of contenders
// SIGKILLed and interrupted at random points, contenders of the seed's Node
// tool mixed with gpuexec, signal storms, and jobs whose grandchildren
// outlive a killed gpuexec. Every critical section proves it runs alone by
// taking a non-blocking flock on a "truth" file, which the kernel drops the
// instant its holders die, so no SIGKILL can hide an overlap.
//
// The tests build the gpuexec binary and their job (testdata/job) without
// the race detector and run them as separate processes, on locks under
// t.TempDir(). They run on Linux. CI runs them at a bounded size; by hand:
//
//	go test ./torture -run TestCrashStorm -v -timeout 30m -torture.sections=20000
//
// Flags (after the package): -torture.sections, -torture.contenders,
// -torture.kill-pct, -torture.int-pct, -torture.seed, -torture.poll,
// -torture.mixed-sections, -torture.node-contenders.
//
// There is nothing to import here; the package exists for its tests.
package torture
