// asynq (Go), driven as bench/peers/drive.py drives the Python peers and bullmq_node.mjs BullMQ:
//
//	asynq-bench worker  URL QUEUE              one worker process: a Server of BENCH_CONCURRENCY (default 10)
//	asynq-bench enqueue URL QUEUE N            N no-op tasks, Client.Enqueue from 100 goroutines; prints JSON
//	asynq-bench stamped URL QUEUE M LO_MS HI_MS  M tasks one at a time, spaced as probe.py's gaps(), stamped
//	asynq-bench config                         the settings, as JSON
//
// The no-op handler counts itself as probe.py does: a process-local counter that a timer adds
// to bench:done every 2 ms (and latencies to bench:lat), never a round trip per job.
// Built by bench/systems.py into bench/.peers-venv/asynq (never committed).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const inFlight = 100

func concurrency() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_CONCURRENCY")); err == nil && n > 0 {
		return n
	}
	return 10
}

func config() string {
	return fmt.Sprintf("Go; Server Concurrency %d (asynq's default is the CPU count), one queue of weight 1, "+
		"no Retention (its default: a completed task is deleted); Client.Enqueue, %d goroutines in flight "+
		"(asynq has no bulk enqueue)", concurrency(), inFlight)
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func redisOpt(url string) asynq.RedisConnOpt {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	return opt
}

func worker(url, queue string) {
	probe := redisOpt(url).MakeRedisClient().(*redis.Client)
	var count atomic.Int64
	var mu sync.Mutex
	var lat []interface{}
	go func() {
		for range time.Tick(2 * time.Millisecond) {
			c := count.Swap(0)
			mu.Lock()
			l := lat
			lat = nil
			mu.Unlock()
			if c == 0 && len(l) == 0 {
				continue
			}
			pipe := probe.Pipeline()
			if len(l) > 0 {
				pipe.RPush(context.Background(), "bench:lat", l...)
			}
			if c > 0 {
				pipe.IncrByFloat(context.Background(), "bench:done", float64(c))
			}
			pipe.Exec(context.Background())
		}
	}()
	srv := asynq.NewServer(redisOpt(url), asynq.Config{
		Concurrency: concurrency(),
		Queues:      map[string]int{queue: 1},
		LogLevel:    asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(ctx context.Context, t *asynq.Task) error {
		if p := t.Payload(); len(p) > 0 {
			if stamp, err := strconv.ParseFloat(string(p), 64); err == nil {
				mu.Lock()
				lat = append(lat, strconv.FormatFloat((now()-stamp)*1000, 'f', 3, 64))
				mu.Unlock()
			}
		}
		count.Add(1)
		return nil
	})
	if err := srv.Run(mux); err != nil { // returns on SIGTERM or SIGINT, after a graceful shutdown
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func enqueue(url, queue string, n int) {
	client := asynq.NewClient(redisOpt(url))
	defer client.Close()
	client.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(queue)) // connect before the clock starts
	start := now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < inFlight; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n-1) {
				if _, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(queue)); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
		}()
	}
	wg.Wait()
	printTimes(start)
}

func stamped(url, queue string, m int, lo, hi float64) {
	client := asynq.NewClient(redisOpt(url))
	defer client.Close()
	start := now()
	for i := 0; i < m; i++ {
		gap := lo + (hi-lo)*math.Mod(float64(i)*0.6180339887, 1.0)
		time.Sleep(time.Duration(gap * float64(time.Millisecond)))
		payload := []byte(strconv.FormatFloat(now(), 'f', 6, 64))
		if _, err := client.Enqueue(asynq.NewTask("noop", payload), asynq.Queue(queue)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	printTimes(start)
}

func printTimes(start float64) {
	out, _ := json.Marshal(map[string]float64{"start": start, "end": now()})
	fmt.Println(string(out))
}

func main() {
	args := os.Args[1:]
	if len(args) == 1 && args[0] == "config" {
		out, _ := json.Marshal(map[string]string{"config": config()})
		fmt.Println(string(out))
		return
	}
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: asynq-bench worker|enqueue|stamped URL QUEUE [N | M LO_MS HI_MS] | config")
		os.Exit(2)
	}
	what, url, queue := args[0], args[1], args[2]
	switch what {
	case "worker":
		worker(url, queue)
	case "enqueue":
		n, _ := strconv.Atoi(args[3])
		enqueue(url, queue, n)
	case "stamped":
		m, _ := strconv.Atoi(args[3])
		lo, _ := strconv.ParseFloat(args[4], 64)
		hi, _ := strconv.ParseFloat(args[5], 64)
		stamped(url, queue, m, lo, hi)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", what)
		os.Exit(2)
	}
}
