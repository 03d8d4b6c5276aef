package store

// The durable pull consumers of workspaces' topics, as the bus's consumer
// routes use them (SPEC §7): created on a connection's first pull under a
// name, owned by that connection, bounded in number per connection, pulled
// with a long-poll and acknowledged through JetStream's ack subjects.

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConsumerMetadataConnection is the durable consumer's metadata key naming
// the connection that owns it.
const ConsumerMetadataConnection = "storybus-connection"

// DefaultAckWait is how long a delivered message may stay unacknowledged
// before it is delivered again, unless ConsumerLimits.AckWait says.
const DefaultAckWait = 30 * time.Second

// ConsumerLimits bound the durable consumers Consumers creates.
type ConsumerLimits struct {
	// PerConnection is the most durable consumers one connection may have
	// on a workspace's topic; opening one more fails with a
	// *ConsumerLimitError. 0 means no limit.
	PerConnection int
	// InactiveThreshold is how long a durable consumer may go without a
	// pull or an acknowledgement before JetStream removes it, with its
	// position; a later pull under its name creates it again, from the
	// start of the topic. 0 never removes one.
	InactiveThreshold time.Duration
	// AckWait is how long a delivered message may stay unacknowledged
	// before it is delivered again; 0 takes DefaultAckWait. A consumer
	// keeps the ack wait it was created with.
	AckWait time.Duration
}

// DefaultConsumerLimits returns the consumer limits a bus has unless told
// otherwise: ten consumers per connection, removed after a week idle (the
// idempotency window: a consumer back within it loses nothing), and the
// default ack wait.
func DefaultConsumerLimits() ConsumerLimits {
	return ConsumerLimits{PerConnection: 10, InactiveThreshold: 7 * 24 * time.Hour, AckWait: DefaultAckWait}
}

// ErrConsumerNotFound is returned by Consumers.Find for a consumer that does
// not exist (never created, or removed after InactiveThreshold).
var ErrConsumerNotFound = errors.New("store: consumer does not exist")

// ErrConsumerNameTaken is returned for a consumer name that another
// connection owns, or that was not created by Consumers.
var ErrConsumerNameTaken = errors.New("store: consumer name belongs to another connection")

// ConsumerLimitError is returned by Consumers.Open when the connection
// already has ConsumerLimits.PerConnection durable consumers.
type ConsumerLimitError struct {
	// Connection is the connection at its limit.
	Connection string
	// Limit is ConsumerLimits.PerConnection.
	Limit int
}

func (e *ConsumerLimitError) Error() string {
	return fmt.Sprintf("store: connection %s has %d durable consumers, the most it may have", e.Connection, e.Limit)
}

// ConsumerRef names one durable consumer: its workspace's topic, its name,
// and the connection that asks for it.
type ConsumerRef struct {
	Workspace  string
	Name       string
	Connection string
}

// Consumers owns the durable pull consumers of the workspaces' topics:
// their creation and ownership, their per-connection limit, pulls and
// acknowledgements.
type Consumers struct {
	js     jetstream.JetStream
	conn   *nats.Conn
	limits ConsumerLimits
	log    *slog.Logger
}

// Consumers returns the store's consumers under limits; log receives their
// creations and changes.
func (s *Store) Consumers(limits ConsumerLimits, log *slog.Logger) *Consumers {
	limits.AckWait = cmp.Or(limits.AckWait, DefaultAckWait)
	if log == nil {
		log = slog.Default()
	}
	return &Consumers{js: s.JS, conn: s.Conn, limits: limits, log: log}
}

// Limits returns the limits the consumers are created under.
func (cs *Consumers) Limits() ConsumerLimits { return cs.limits }

// Open returns the durable pull consumer ref names, creating it on first
// use with filters as its filter subjects, and moving its filter to filters
// when they differ (filters sorted). A name owned by another connection
// fails with ErrConsumerNameTaken, a creation past the connection's limit
// with a *ConsumerLimitError.
func (cs *Consumers) Open(ctx context.Context, ref ConsumerRef, filters []string) (jetstream.Consumer, error) {
	return cs.open(ctx, ref, filters, true)
}

// Find returns the existing durable consumer ref names, as Open does but
// never creating one (ErrConsumerNotFound) nor changing its filter.
func (cs *Consumers) Find(ctx context.Context, ref ConsumerRef) (jetstream.Consumer, error) {
	return cs.open(ctx, ref, nil, false)
}

func (cs *Consumers) open(ctx context.Context, ref ConsumerRef, filters []string, create bool) (jetstream.Consumer, error) {
	stream := StreamName(ref.Workspace)
	cfg := jetstream.ConsumerConfig{
		Durable:        ref.Name,
		Description:    "storybus HTTP pull consumer of connection " + ref.Connection,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cs.limits.AckWait,
		FilterSubjects: filters,
		Metadata:       map[string]string{ConsumerMetadataConnection: ref.Connection},
		// An abandoned consumer goes by itself: names cannot pile up.
		InactiveThreshold: cs.limits.InactiveThreshold,
	}
	for try := 0; ; try++ {
		cons, err := cs.js.Consumer(ctx, stream, ref.Name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			if !create {
				return nil, ErrConsumerNotFound
			}
			if err := cs.checkLimit(ctx, ref, ""); err != nil {
				return nil, err
			}
			cons, err = cs.js.CreateConsumer(ctx, stream, cfg)
			if (errors.Is(err, jetstream.ErrConsumerExists) || errors.Is(err, jetstream.ErrConsumerNameAlreadyInUse)) && try == 0 {
				continue // created concurrently: check the other one's owner
			}
			if err != nil {
				return nil, err
			}
			// Creations racing on other names, here or on another
			// replica, all passed the check: the oldest stay.
			if err := cs.checkLimit(ctx, ref, ref.Name); err != nil {
				if derr := cs.js.DeleteConsumer(ctx, stream, ref.Name); derr != nil && !errors.Is(derr, jetstream.ErrConsumerNotFound) {
					// Left in place, it would stay past the limit: a
					// store failure, not a refusal.
					return nil, fmt.Errorf("removing consumer %s (%v): %w", ref.Name, err, derr)
				}
				return nil, err
			}
			cs.log.InfoContext(ctx, "created consumer", "workspace", ref.Workspace, "consumer", ref.Name, "connection", ref.Connection)
		}
		if err != nil {
			return nil, err
		}
		info := cons.CachedInfo()
		if owner := info.Config.Metadata[ConsumerMetadataConnection]; owner != ref.Connection {
			return nil, ErrConsumerNameTaken
		}
		refilter := filters != nil && !sameFilters(info.Config, filters)
		if !refilter && info.Config.InactiveThreshold == cfg.InactiveThreshold {
			return cons, nil
		}
		// The families asked for, the grant, or the inactivity threshold
		// changed.
		upd := info.Config
		upd.InactiveThreshold = cfg.InactiveThreshold
		if refilter {
			upd.FilterSubject = ""
			upd.FilterSubjects = filters
		}
		cons, err = cs.js.UpdateConsumer(ctx, stream, upd)
		if err != nil {
			return nil, err
		}
		cs.log.InfoContext(ctx, "changed consumer", "workspace", ref.Workspace, "consumer", ref.Name, "filters", strings.Join(upd.FilterSubjects, " "), "inactiveThreshold", upd.InactiveThreshold)
		return cons, nil
	}
}

// checkLimit checks the connection's count of durable consumers on the
// topic against ConsumerLimits.PerConnection. Before a creation (mine
// empty) it fails when the connection has them all; after one, it fails
// when consumer mine is not among the connection's oldest, so that of
// creations racing past the first check only the earliest stay.
func (cs *Consumers) checkLimit(ctx context.Context, ref ConsumerRef, mine string) error {
	limit := cs.limits.PerConnection
	if limit <= 0 {
		return nil
	}
	type owned struct {
		name    string
		created time.Time
	}
	var have []owned
	topic, err := cs.js.Stream(ctx, StreamName(ref.Workspace))
	if err != nil {
		return err
	}
	list := topic.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Config.Metadata[ConsumerMetadataConnection] == ref.Connection {
			have = append(have, owned{info.Name, info.Created})
		}
	}
	if err := list.Err(); err != nil {
		return err
	}
	slices.SortFunc(have, func(a, b owned) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	over := len(have) >= limit
	if mine != "" {
		over = !slices.ContainsFunc(have[:min(limit, len(have))], func(o owned) bool { return o.name == mine })
	}
	if over {
		return &ConsumerLimitError{Connection: ref.Connection, Limit: limit}
	}
	return nil
}

func sameFilters(cfg jetstream.ConsumerConfig, want []string) bool {
	have := slices.Clone(cfg.FilterSubjects)
	if cfg.FilterSubject != "" {
		have = append(have, cfg.FilterSubject)
	}
	slices.Sort(have)
	return slices.Equal(have, want)
}

// minPullWait is the shortest wait of a pull that waits at all: a wait
// shorter than the store's round trip would expire before the pull is sent.
const minPullWait = 100 * time.Millisecond

// Pull returns up to limit of the consumer's next messages. It returns as
// soon as one message is there, with whatever else is there at that
// moment, or empty-handed after wait (at once for a wait of 0). With
// messages, an error says the pull ended early.
func (cs *Consumers) Pull(ctx context.Context, cons jetstream.Consumer, limit int, wait time.Duration) ([]jetstream.Msg, error) {
	var first jetstream.MessageBatch
	var err error
	if wait <= 0 {
		first, err = cons.FetchNoWait(limit)
	} else {
		wctx, cancel := context.WithTimeout(ctx, max(wait, minPullWait))
		defer cancel()
		first, err = cons.Fetch(1, jetstream.FetchContext(wctx))
	}
	if err != nil {
		return nil, err
	}
	msgs, err := drain(first)
	if err != nil || len(msgs) == 0 || len(msgs) >= limit || wait <= 0 {
		return msgs, ignoreEnd(err)
	}
	rest, err := cons.FetchNoWait(limit - len(msgs))
	if err != nil {
		return msgs, err
	}
	more, err := drain(rest)
	return append(msgs, more...), ignoreEnd(err)
}

func drain(b jetstream.MessageBatch) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, b.Error()
}

// ignoreEnd drops the errors that only say a long-poll ended.
func ignoreEnd(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) {
		return nil
	}
	return err
}

// ackTimeout bounds the store's confirmation of one request's
// acknowledgements.
const ackTimeout = 5 * time.Second

// ackConcurrency bounds the acknowledgements of one request in flight.
const ackConcurrency = 32

// Ack sends payload (an acknowledgement of JetStream's protocol: +ACK,
// -NAK, +WPI, +TERM) to every acknowledgement subject, at most
// ackConcurrency at a time, and waits for the store to confirm each. It
// returns how many were not confirmed and the first error. The subjects
// must have been checked to be the consumer's: Ack sends to them as they
// are.
func (cs *Consumers) Ack(ctx context.Context, subjects []string, payload []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	errs := make([]error, len(subjects))
	slots := make(chan struct{}, ackConcurrency)
	var wg sync.WaitGroup
	for i, subj := range subjects {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			_, errs[i] = cs.conn.RequestWithContext(ctx, subj, payload)
		})
	}
	wg.Wait()
	failed, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	return failed, first
}

// ParseSubject is the inverse of Subject: the workspace, family and key of
// a topic message's subject.
func ParseSubject(subject string) (workspace, family, key string, ok bool) {
	tokens := strings.Split(subject, ".")
	if len(tokens) != 4 || tokens[0] != "som" {
		return "", "", "", false
	}
	k, err := base64.RawURLEncoding.DecodeString(tokens[3])
	if err != nil {
		return "", "", "", false
	}
	return tokens[1], tokens[2], string(k), true
}
