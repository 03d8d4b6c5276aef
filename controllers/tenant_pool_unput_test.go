package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/bus/store"
)

// TestATenantDeletedBeforeItsFirstDocumentHasItsStreamDeleted: the
// operator opens a pooled workspace's stream before it first puts the
// workspace's document into the pool. When that put fails (here a
// document larger than the server's max payload) the Tenant is placed on
// the pool nonetheless, its document hash empty, so that deleting it
// under deletionPolicy delete deletes the stream: recorded only once its
// document was in, the Tenant was let go and its stream stayed on the
// cluster.
func TestATenantDeletedBeforeItsFirstDocumentHasItsStreamDeleted(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		MaxPayload: 4096, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("the NATS server did not start within 30s")
	}
	st, err := store.Connect(store.Options{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()

	ns := newNamespace(t)
	create(t, newBusPool(ns, "shared", srv.ClientURL()))
	waitCondition(t, ns, "shared", &v1alpha1.BusPool{}, busPoolGen, v1alpha1.ConditionClusterReady, metav1.ConditionTrue, v1alpha1.ReasonClusterConnected)
	// A module of about 9 KB makes a document over the server's 4 KB.
	rego := "package storybus.tenant.desk\n" + strings.Repeat("# a comment that makes the module long\n", 240)
	create(t, newTenant(ns, "unput", func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"}
		tn.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
		tn.Spec.Policies = []v1alpha1.PolicyModule{{Name: "desk", Rego: rego, Rules: []v1alpha1.TenantRule{{ID: "tenant.flag"}}}}
	}))
	create(t, newConnection(ns, "cms", "unput"))

	tn := &v1alpha1.Tenant{}
	waitCondition(t, ns, "unput", tn, tenantGen, v1alpha1.ConditionPoolReady, metav1.ConditionFalse, v1alpha1.ReasonPoolUnreachable)
	eventually(t, "the Tenant placed on the pool, its document hash empty, and its stream opened", func() error {
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "unput"}, tn); err != nil {
			return err
		}
		if pl := tn.Status.Pool; pl == nil || pl.Namespace != ns || pl.Name != "shared" || pl.DocumentHash != "" {
			return fmt.Errorf("status.pool %+v", tn.Status.Pool)
		}
		_, err := st.JS.Stream(ctx, store.StreamName("unput"))
		return err
	})

	if err := k8s.Delete(ctx, newTenant(ns, "unput")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Tenant and its stream gone", func() error {
		if err := gone(ns, "unput", &v1alpha1.Tenant{}); err != nil {
			return err
		}
		if _, err := st.JS.Stream(ctx, store.StreamName("unput")); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("the stream: %v", err)
		}
		return nil
	})
	waitEvent(t, ns, "Tenant", "unput", "DataDeleted")
}
