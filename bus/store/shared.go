package store

// Buckets shared by the workspaces of a pool's cluster: a workspace's
// records and limit counters as keys of a few buckets, not buckets of its
// own (docs/pools.md, "One stream per workspace").

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SharedLimitsBucket is the limits bucket of every workspace a pool serves
// on its cluster.
const SharedLimitsBucket = "storybus-limits"

// sharedRecordsPrefix begins the name of each shared records bucket, one
// per idempotency window, since a bucket has one TTL.
const sharedRecordsPrefix = "storybus-records-"

// SharedRecordsBucket returns the name of the records bucket the pooled
// workspaces whose idempotency window is window share.
func SharedRecordsBucket(window time.Duration) string {
	return sharedRecordsPrefix + strconv.FormatInt(int64(window/time.Second), 10) + "s"
}

// isSharedBucket reports whether a bucket is one the workspaces of a
// cluster share.
func isSharedBucket(bucket string) bool {
	return bucket == SharedLimitsBucket || strings.HasPrefix(bucket, sharedRecordsPrefix)
}

// SharedKeyPrefix is what a workspace's keys begin with in a shared
// bucket: its id (a valid key token: Tenant's workspaceID pattern) and a
// dot.
func SharedKeyPrefix(workspace string) string { return workspace + "." }

// errNotShared is the answer of the operations a workspace's part of a
// shared bucket does not offer: they would reach every workspace's keys.
var errNotShared = errors.New("not offered on a workspace's keys of a shared bucket")

// SharedKeys returns a workspace's part of a shared bucket: each key is
// read and written as the workspace's prefix and the key, and entries
// name the key without it. Listing, watching, history and purging delete
// markers are refused.
func SharedKeys(kv jetstream.KeyValue, workspace string) jetstream.KeyValue {
	return &sharedKeys{KeyValue: kv, prefix: SharedKeyPrefix(workspace)}
}

// sharedKeys is a workspace's keys of a shared bucket.
type sharedKeys struct {
	jetstream.KeyValue
	prefix string
}

// sharedEntry is an entry of a shared bucket named by its key without the
// workspace's prefix.
type sharedEntry struct {
	jetstream.KeyValueEntry
	key string
}

func (e sharedEntry) Key() string { return e.key }

func (k *sharedKeys) entry(key string, e jetstream.KeyValueEntry, err error) (jetstream.KeyValueEntry, error) {
	if err != nil {
		return nil, err
	}
	return sharedEntry{KeyValueEntry: e, key: key}, nil
}

func (k *sharedKeys) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, k.prefix+key)
	return k.entry(key, e, err)
}

func (k *sharedKeys) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.GetRevision(ctx, k.prefix+key, revision)
	return k.entry(key, e, err)
}

func (k *sharedKeys) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return k.KeyValue.Put(ctx, k.prefix+key, value)
}

func (k *sharedKeys) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return k.KeyValue.PutString(ctx, k.prefix+key, value)
}

func (k *sharedKeys) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return k.KeyValue.Create(ctx, k.prefix+key, value, opts...)
}

func (k *sharedKeys) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return k.KeyValue.Update(ctx, k.prefix+key, value, revision)
}

func (k *sharedKeys) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return k.KeyValue.Delete(ctx, k.prefix+key, opts...)
}

func (k *sharedKeys) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return k.KeyValue.Purge(ctx, k.prefix+key, opts...)
}

func (k *sharedKeys) Watch(context.Context, string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, errNotShared
}

func (k *sharedKeys) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, errNotShared
}

func (k *sharedKeys) WatchFiltered(context.Context, []string, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return nil, errNotShared
}

func (k *sharedKeys) Keys(context.Context, ...jetstream.WatchOpt) ([]string, error) {
	return nil, errNotShared
}

func (k *sharedKeys) ListKeys(context.Context, ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return nil, errNotShared
}

func (k *sharedKeys) ListKeysFiltered(context.Context, ...string) (jetstream.KeyLister, error) {
	return nil, errNotShared
}

func (k *sharedKeys) History(context.Context, string, ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	return nil, errNotShared
}

func (k *sharedKeys) PurgeDeletes(context.Context, ...jetstream.KVPurgeOpt) error {
	return errNotShared
}

// purgeShared removes a workspace's keys from every shared bucket of the
// cluster, returning those it purged ("keys of bucket …").
func purgeShared(ctx context.Context, js jetstream.JetStream, workspace string) ([]string, error) {
	var purged []string
	names := js.StreamNames(ctx)
	var streams []string
	for name := range names.Name() {
		if bucket, ok := strings.CutPrefix(name, "KV_"); ok && isSharedBucket(bucket) {
			streams = append(streams, name)
		}
	}
	if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("list the shared buckets: %w", err)
	}
	for _, name := range streams {
		bucket := strings.TrimPrefix(name, "KV_")
		stream, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return purged, fmt.Errorf("bucket %s: %w", bucket, err)
		}
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+bucket+"."+SharedKeyPrefix(workspace)+">")); err != nil {
			return purged, fmt.Errorf("purge the keys of %s from bucket %s: %w", workspace, bucket, err)
		}
		purged = append(purged, "keys of bucket "+bucket)
	}
	return purged, nil
}
