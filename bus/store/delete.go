package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// LimitsBucket is the name of a workspace's rate limit and quota bucket.
func LimitsBucket(workspace string) string { return "limits-" + workspace }

// DeleteWorkspace deletes what a workspace is made of in the store: its
// stream, its records and limits buckets (those that exist) and its keys
// of the buckets pooled workspaces share. It returns what it deleted
// ("stream …", "bucket …", "keys of bucket …"), even when it then failed. This
// is the one place that knows a workspace's store objects for whoever
// deletes one (the operator, for a Tenant whose deletion policy says so).
func DeleteWorkspace(ctx context.Context, js jetstream.JetStream, workspace string) ([]string, error) {
	var deleted []string
	stream := StreamName(workspace)
	switch err := js.DeleteStream(ctx, stream); {
	case err == nil:
		deleted = append(deleted, "stream "+stream)
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return deleted, fmt.Errorf("delete stream %s: %w", stream, err)
	}
	for _, bucket := range []string{RecordsBucket(workspace), LimitsBucket(workspace)} {
		switch err := js.DeleteKeyValue(ctx, bucket); {
		case err == nil:
			deleted = append(deleted, "bucket "+bucket)
		case !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound):
			return deleted, fmt.Errorf("delete bucket %s: %w", bucket, err)
		}
	}
	purged, err := purgeShared(ctx, js, workspace)
	return append(deleted, purged...), err
}
