package jobs

import (
	"context"
	"errors"
	"testing"
	"time"
)

type key struct{}

func TestJobOutlivesItsReconcileAndKeepsItsResult(t *testing.T) {
	var s Set[string]
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	release := make(chan struct{})
	var ended error
	j := s.Start(ctx, "a", "state", func(ctx context.Context, j *Job[string]) error {
		if ctx.Value(key{}) != "v" || j.State != "state" {
			return errors.New("the job lost its context's values or its state")
		}
		<-release
		return ctx.Err()
	}, func(j *Job[string]) { ended = errors.Join(j.Err(), errors.New("ended")) })
	cancel() // the reconcile's context ends; the job runs on
	if j.Ended() {
		t.Fatal("the job ended with its reconcile's context")
	}
	close(release)
	<-j.Done()
	if j.Err() != nil || ended == nil || ended.Error() != "ended" {
		t.Fatalf("Err %v, ended %v: want nil and the callback run before Done", j.Err(), ended)
	}
	if s.Get("a") != j {
		t.Fatal("an ended job left the set before its result was collected")
	}
	s.Forget("a", j)
	if s.Get("a") != nil {
		t.Fatal("Forget kept the job")
	}
}

func TestStopCancelsAndWaits(t *testing.T) {
	var s Set[int]
	started := make(chan struct{}, 3)
	for _, k := range []string{"a", "b", "c"} {
		s.Start(context.Background(), k, 0, func(ctx context.Context, _ *Job[int]) error {
			started <- struct{}{}
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond) // cleans up after the cancel
			return ctx.Err()
		}, nil)
	}
	for range 3 {
		<-started
	}
	a := s.Get("a")
	s.Stop("a")
	if !a.Ended() || !errors.Is(a.Err(), context.Canceled) || s.Get("a") != nil {
		t.Fatalf("Stop: ended %v, err %v, still held %v", a.Ended(), a.Err(), s.Get("a") != nil)
	}
	b, c := s.Get("b"), s.Get("c")
	s.StopAll()
	if !b.Ended() || !c.Ended() || s.Get("b") != nil || s.Get("c") != nil {
		t.Fatal("StopAll left a job running or held")
	}
	s.Stop("nothing") // no job: nothing to do
}

// Forget of an ended job leaves a newer job of the key in place.
func TestForgetOnlyThatJob(t *testing.T) {
	var s Set[int]
	old := s.Start(context.Background(), "a", 1, func(context.Context, *Job[int]) error { return nil }, nil)
	<-old.Done()
	release := make(chan struct{})
	cur := s.Start(context.Background(), "a", 2, func(context.Context, *Job[int]) error { <-release; return nil }, nil)
	s.Forget("a", old)
	if s.Get("a") != cur {
		t.Fatal("Forget of the old job dropped the new one")
	}
	close(release)
	<-cur.Done()
}
