package loop

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestEveryStepsAtOnceThenAtEachInterval(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	steps := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, clk, time.Second, func(context.Context) { steps <- clk.Now() })
	}()
	if at := <-steps; !at.Equal(time.Unix(0, 0)) {
		t.Fatalf("first step at %v, want at once", at)
	}
	for i := 1; i <= 3; i++ {
		clk.Step(time.Second)
		if at := <-steps; !at.Equal(time.Unix(int64(i), 0)) {
			t.Fatalf("step %d at %v", i, at)
		}
	}
	cancel()
	clk.Step(time.Second) // a tick racing the cancel may take one more step
	select {
	case <-steps:
	case <-done:
	}
	<-done
}
