package launch_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/shoalml/shoal/launch"
)

// A child's side of the protocol, as `shoal worker --events` speaks it:
// events on its stdout, and its launcher's control lines read from its
// stdin (here a pipe the example writes to, as Tell does).
func Example_child() {
	stdin, launcher := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ctl, err := launch.WatchControl(stdin, stop)
	if err != nil {
		panic(err)
	}
	defer ctl.Close()

	launch.Emit(os.Stdout, launch.Event{Event: launch.Progress, Rank: 1, Step: 7})
	fmt.Fprintln(launcher, launch.Stop)
	<-ctx.Done() // the run ends here, keeping what it did
	launch.Emit(os.Stdout, launch.Event{Event: launch.Done, Rank: 1, Steps: 7, Stopped: true})
	// Output:
	// {"event":"progress","rank":1,"step":7}
	// {"event":"done","rank":1,"steps":7,"stopped":true}
}
