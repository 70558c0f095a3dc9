// Command leader is a standby service: it campaigns for leadership of an election and does
// leader-only work (printing a line every second, with its fencing token) exactly while it
// leads. Start two or three of them, then stop, freeze (kill -STOP) or drain the gateway the
// leader uses: the leader stops at once, and another takes over.
//
//	ZKGATE_ENDPOINT=http://127.0.0.1:50051,http://127.0.0.1:50052 ./go.sh run ./examples/leader [NAME]
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	zkgate "github.com/zkgate/zkgate/clients/go"
)

func main() {
	election := "example"
	if len(os.Args) > 1 {
		election = os.Args[1]
	}
	host, _ := os.Hostname()
	me := host + "-" + time.Now().Format("150405.000")

	client, err := zkgate.New(zkgate.WithLogger(log.Printf))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log.Printf("%s campaigning in %q on %v", me, election, client.Endpoints())
	err = client.RunWhileLeader(ctx, election, me, []byte(fmt.Sprint("pid ", os.Getpid())), func(ctx context.Context, l *zkgate.Leadership) error {
		log.Printf("elected on %s, fencing token %d", l.Endpoint(), l.FencingToken())
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				if l.Err() != nil {
					log.Printf("leadership lost: %v", l.Err())
				}
				return nil
			case <-tick.C:
				log.Printf("leading (token %d)", l.FencingToken())
			}
		}
	})
	if err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
	log.Printf("resigned")
}
