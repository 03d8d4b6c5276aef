package controllers

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/store"
)

// externalDataTimeout bounds the connection to an external NATS cluster
// and the deletions there.
const externalDataTimeout = 15 * time.Second

// busStopPoll is how often a deletion checks whether the bus pods are gone.
const busStopPoll = 2 * time.Second

// deleteExternalData applies deletionPolicy delete to a Tenant on external
// storage: it stops the bus (its StatefulSet), waits until no bus pod is
// left (so that none recreates what is deleted), then deletes the
// workspace's topic stream (with its consumers), records bucket and limits
// bucket on the cluster, with the Tenant's NATS credentials. A workspace
// that another Tenant serves on that cluster is left alone. It returns
// how long to wait before trying again, or 0 when done.
func (r *TenantWorkloadReconciler) deleteExternalData(ctx context.Context, t *v1alpha1.Tenant) (time.Duration, error) {
	ext := t.Spec.Storage.External
	ws := t.EffectiveWorkspaceID()
	others, err := r.rivals(ctx, t)
	if err != nil {
		return 0, err
	}
	for _, o := range others {
		if o.serving {
			r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "DataKept", "Delete",
				"deletionPolicy delete: workspace %s on %s is served by Tenant %s/%s; its data is kept", ws, ext.URL, o.tenant.Namespace, o.tenant.Name)
			return 0, nil
		}
	}
	if err := r.stopBus(ctx, t); err != nil {
		return 0, err
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels(selectorLabels(t))); err != nil {
		return 0, fmt.Errorf("list bus pods: %w", err)
	}
	if len(pods.Items) > 0 {
		return busStopPoll, nil
	}
	var creds []byte
	if ref := ext.CredentialsSecretRef; ref != nil {
		sec := &corev1.Secret{}
		if err := r.Secrets.Get(ctx, types.NamespacedName{Namespace: t.Namespace, Name: ref.Name}, sec); err != nil {
			return 0, r.dataDeletionFailed(t, fmt.Errorf("read the NATS credentials Secret %s: %w", ref.Name, err))
		}
		if creds = sec.Data[natsCredsKey(ref)]; len(creds) == 0 {
			return 0, r.dataDeletionFailed(t, fmt.Errorf("the Secret %s has no key %s", ref.Name, natsCredsKey(ref)))
		}
	}
	deleted, err := deleteWorkspaceData(ctx, ext.URL, creds, ws)
	if err != nil {
		return 0, r.dataDeletionFailed(t, err)
	}
	r.Recorder.Eventf(t, nil, corev1.EventTypeNormal, "DataDeleted", "Delete",
		"deletionPolicy delete: deleted %v of workspace %s on %s", deleted, ws, ext.URL)
	return 0, nil
}

// dataDeletionFailed records why the data could not be deleted, and how to
// let the Tenant go without it, and returns err.
func (r *TenantWorkloadReconciler) dataDeletionFailed(t *v1alpha1.Tenant, err error) error {
	r.Recorder.Eventf(t, nil, corev1.EventTypeWarning, "DataDeletionFailed", "Delete",
		"deletionPolicy delete: %v; retrying (set spec.deletionPolicy to retain to delete the Tenant and keep the data)", err)
	return fmt.Errorf("delete the workspace's data: %w", err)
}

// deleteWorkspaceData connects to the NATS cluster at url (with the
// credentials file's contents, if any) and deletes the workspace's topic
// stream and its key-value buckets. What is already gone is not an error.
// It returns the names of what it deleted.
func deleteWorkspaceData(ctx context.Context, url string, creds []byte, workspace string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, externalDataTimeout)
	defer cancel()
	opts := []nats.Option{nats.Name("storybus-operator"), nats.Timeout(externalDataTimeout), nats.MaxReconnects(0)}
	if len(creds) > 0 {
		f, err := os.CreateTemp("", "storybus-nats-*.creds")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		if _, err := f.Write(creds); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(f.Name()))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return store.DeleteWorkspace(ctx, js, workspace)
}
