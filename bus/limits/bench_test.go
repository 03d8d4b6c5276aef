package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/bus/store"
)

// casAdmitter is the design group commit is measured against: every check
// is decided by a compare-and-swap of its own on the connection's key. It
// is optimistic, as the limiter is: it writes over the last state this
// process saw, and reads the key again only when a write lost to another.
type casAdmitter struct {
	l   *Limiter
	key string

	mu    sync.Mutex
	st    state
	rev   uint64
	known bool
}

var errTooManyWriters = errors.New("limits: too many concurrent writers")

func (a *casAdmitter) admit(lim config.Limits) (Decision, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.l.opTimeout)
	defer cancel()
	for range maxAttempts {
		a.mu.Lock()
		st, rev, known := a.st.clone(), a.rev, a.known
		a.mu.Unlock()
		if !known {
			var err error
			if st, rev, err = a.l.load(ctx, a.key); err != nil {
				return Decision{}, err
			}
		}
		now := a.l.clock.Now()
		changed := st.roll(now)
		d, _, used := decide(&st, now, lim, a.l.lease)
		if !changed && !used {
			return d, nil
		}
		next, err := a.l.put(ctx, a.key, st, rev)
		a.mu.Lock()
		switch {
		case err == nil && next > a.rev:
			a.st, a.rev, a.known = st, next, true
		case err != nil:
			a.known = false
		}
		a.mu.Unlock()
		if err == nil {
			return d, nil
		}
		if !store.IsConflict(err) {
			return Decision{}, err
		}
	}
	return Decision{}, errTooManyWriters
}

// BenchmarkAdmit measures the group-commit limiter (Limiter.Admit: one
// check leads, the others queue, and each batch is one compare-and-swap)
// against one compare-and-swap per check (casAdmitter), with 1, 8 and 64
// concurrent checks of one connection, on an embedded JetStream that
// fsyncs every write (the serve default) or periodically. Every check is
// admitted and moves the rate limit on, so every check must be written.
// Besides ns/op it reports the store writes per check (writes/op) and the
// checks that failed for want of a successful write in 16 attempts or the
// 2 s budget (failed/op).
func BenchmarkAdmit(b *testing.B) {
	lim := config.Limits{RatePerSecond: 1e9, Burst: 1 << 30}
	designs := []struct {
		name  string
		admit func(l *Limiter, connection string) func() error
	}{
		{"group-commit", func(l *Limiter, connection string) func() error {
			return func() error { _, err := l.Admit(connection, lim); return err }
		}},
		{"cas-per-check", func(l *Limiter, connection string) func() error {
			a := &casAdmitter{l: l, key: Key(connection)}
			return func() error { _, err := a.admit(lim); return err }
		}},
	}
	for _, syncAlways := range []bool{true, false} {
		name := "sync=interval"
		if syncAlways {
			name = "sync=always"
		}
		b.Run(name, func(b *testing.B) {
			ns, err := store.StartEmbedded(store.EmbeddedOptions{DataDir: b.TempDir(), SyncAlways: syncAlways})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
			st, err := store.Connect(store.Options{Embedded: ns})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(st.Close)
			for _, n := range []int{1, 8, 64} {
				for _, design := range designs {
					b.Run(fmt.Sprintf("concurrent=%d/%s", n, design.name), func(b *testing.B) {
						ws := fmt.Sprintf("bench-%s-%d", design.name, n)
						l, err := Open(context.Background(), st.JS, ws, Options{})
						if err != nil {
							b.Fatal(err)
						}
						bucket, err := st.JS.Stream(context.Background(), "KV_"+BucketName(ws))
						if err != nil {
							b.Fatal(err)
						}
						before := bucket.CachedInfo().State.LastSeq
						admit := design.admit(l, "c")
						var next, failed atomic.Int64
						var wg sync.WaitGroup
						b.ResetTimer()
						for range n {
							wg.Go(func() {
								for next.Add(1) <= int64(b.N) {
									if admit() != nil {
										failed.Add(1)
									}
								}
							})
						}
						wg.Wait()
						b.StopTimer()
						info, err := bucket.Info(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(info.State.LastSeq-before)/float64(b.N), "writes/op")
						b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
					})
				}
			}
		})
	}
}
