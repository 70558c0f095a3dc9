// Command zkgate-agent is the Go client's conformance agent: tests/cross_language.rs starts it
// as a child process and reads its events (the protocol is in clients/CONFORMANCE.md).
//
//	zkgate-agent elect|lock NAME [--id ID] [--once]
//
// Endpoints come from ZKGATE_ENDPOINT only. It campaigns (or takes the lock) and holds until
// SIGTERM, printing one JSON object per line on standard output:
//
//	{"event":"elected","token":"<u64>","endpoint":"<endpoint>"}   ("acquired" for lock)
//	{"event":"lost","reason":"suspended|silence|unavailable|ended"}
//	{"event":"released"}                                           after SIGTERM, then exit 0
//	{"event":"error","message":"..."}                              then exit 1
//
// Auto-requeue is on unless --once, which exits 3 after the first loss. Logs go to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	zkgate "github.com/zkgate/zkgate/clients/go"
)

var stdout sync.Mutex

// event is one line of output; fields in the order CONFORMANCE.md lists them.
type event struct {
	Event    string `json:"event"`
	Token    string `json:"token,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
}

func emit(e event) {
	line, _ := json.Marshal(e)
	stdout.Lock()
	defer stdout.Unlock()
	// os.Stdout is unbuffered: each line reaches the reader at once.
	fmt.Fprintf(os.Stdout, "%s\n", line)
}

func fail(err error) {
	emit(event{Event: "error", Message: err.Error()})
	os.Exit(1)
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("zkgate-agent: ")
	if len(os.Args) < 3 || (os.Args[1] != "elect" && os.Args[1] != "lock") {
		fail(errors.New("usage: zkgate-agent elect|lock NAME [--id ID] [--once]"))
	}
	verb, name := os.Args[1], os.Args[2]
	flags := flag.NewFlagSet("zkgate-agent", flag.ContinueOnError)
	flags.SetOutput(os.Stderr)
	id := flags.String("id", "go-"+strconv.Itoa(os.Getpid()), "candidate / owner")
	once := flags.Bool("once", false, "no auto-requeue: exit 3 after the first loss")
	if err := flags.Parse(os.Args[3:]); err != nil {
		fail(err)
	}
	if flags.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments: %v", flags.Args()))
	}

	client, err := zkgate.New(zkgate.WithLogger(log.Printf))
	if err != nil {
		fail(err)
	}
	defer client.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	granted := "elected"
	if verb == "lock" {
		granted = "acquired"
	}
	// hold is what both verbs run while holding: report the grant, wait for the end, and
	// report a loss (not our own shutdown).
	hold := func(ctx context.Context, token uint64, endpoint string, done func() error) error {
		emit(event{Event: granted, Token: strconv.FormatUint(token, 10), Endpoint: endpoint})
		<-ctx.Done()
		var lost *zkgate.LostError
		if errors.As(done(), &lost) {
			emit(event{Event: "lost", Reason: string(lost.Reason)})
		}
		return nil
	}
	requeue := zkgate.WithRequeue(!*once)
	if verb == "elect" {
		err = client.RunWhileLeader(ctx, name, *id, nil, func(ctx context.Context, l *zkgate.Leadership) error {
			return hold(ctx, l.FencingToken(), l.Endpoint(), l.Err)
		}, requeue)
	} else {
		err = client.RunWhileHolding(ctx, name, func(ctx context.Context, l *zkgate.Lock) error {
			return hold(ctx, l.FencingToken(), l.Endpoint(), l.Err)
		}, zkgate.WithOwner(*id), zkgate.WithRunOptions(requeue))
	}
	var lost *zkgate.LostError
	switch {
	case ctx.Err() != nil:
		emit(event{Event: "released"})
	case errors.As(err, &lost):
		os.Exit(3)
	case err != nil:
		fail(err)
	}
}
