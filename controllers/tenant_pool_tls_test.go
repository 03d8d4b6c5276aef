package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	config "github.com/storybus/storybus/api/config/v1alpha1"
	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/internal/certgen"
)

// TestPooledTenantBringsItsOwnKeyPair: a pooled Tenant with spec.tls has
// its key pair carried in its workspace's document to the replicas, which
// present it for its certificate's host names. It waits, saying why, for
// its Secret; on a pool serving plain HTTP it is placed without its pair,
// and says so; it never gets the pool Service's name or a wildcard over
// it, nor a name another Tenant on the pool holds or a wildcard over one,
// even when it is the older; a renewed pair reaches the replica; and once
// the holder of a name is deleted or leaves the pool, the next Tenant
// claiming it gets it.
func TestPooledTenantBringsItsOwnKeyPair(t *testing.T) {
	nats, st := startPoolCluster(t)
	ns := newNamespace(t)
	ctx := context.Background()
	create(t, newBusPool(ns, "shared", nats.ClientURL(), func(p *v1alpha1.BusPool) {
		p.Spec.TLS = &v1alpha1.BusPoolTLS{SecretName: "shared-pool-tls"}
	}))
	create(t, newBusPool(ns, "plain", nats.ClientURL()))
	replica, sp := serveSharedPool(t, ns, nats.ClientURL(), st, &v1alpha1.BusPool{})
	ca, err := certgen.NewCA("brands CA")
	if err != nil {
		t.Fatal(err)
	}
	keyPairSecret := func(name string, hosts ...string) (*corev1.Secret, *big.Int) {
		t.Helper()
		p, err := ca.Sign(certgen.Leaf{CommonName: hosts[0], Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: p.CertPEM, corev1.TLSPrivateKeyKey: p.KeyPEM}}, c.Leaf.SerialNumber
	}
	presented := func(host string) *big.Int {
		if c := replica.srv.Hosts().Lookup(host); c != nil {
			return c.Leaf.SerialNumber
		}
		return nil
	}
	poolReady := func(name string) *metav1.Condition {
		tn := &v1alpha1.Tenant{}
		if err := get(ns, name, tn); err != nil {
			return nil
		}
		return findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady)
	}
	hostNames := func(name string) []string {
		tn := &v1alpha1.Tenant{}
		if err := get(ns, name, tn); err != nil || tn.Status.Pool == nil {
			return nil
		}
		return tn.Status.Pool.HostNames
	}
	onPool := func(pool string) func(*v1alpha1.Tenant) {
		return func(tn *v1alpha1.Tenant) {
			tn.Spec.Pool = &v1alpha1.PoolReference{Name: pool}
			tn.Spec.TLS = &v1alpha1.TenantTLS{SecretName: tn.Name + "-pair"}
		}
	}

	// The pool's own pair, whose names no Tenant gets.
	poolSec, _ := keyPairSecret("shared-pool-tls", "pool.storybus.example")
	create(t, poolSec)

	// No Secret yet: not placed, and the condition says so.
	create(t, newTenant(ns, "brand", onPool("shared")))
	eventually(t, "brand waits for its key pair", func() error {
		if c := poolReady("brand"); c == nil || c.Reason != v1alpha1.ReasonKeyPairNotServed || !strings.Contains(c.Message, "Secret brand-pair") {
			return fmt.Errorf("PoolReady %+v", c)
		}
		return nil
	})
	serviceName := "shared-pool." + ns + ".svc"
	sec, brandSerial := keyPairSecret("brand-pair", "news.brand.example", serviceName, "*."+ns+".svc", "pool.storybus.example")
	create(t, sec)
	eventually(t, "the replica presents brand's pair for its host name only", func() error {
		if got := hostNames("brand"); !slices.Equal(got, []string{"news.brand.example"}) {
			return fmt.Errorf("status.pool.hostNames %v", got)
		}
		if got := presented("news.brand.example"); got == nil || got.Cmp(brandSerial) != 0 {
			return fmt.Errorf("presented %v for news.brand.example", got)
		}
		return nil
	})
	if presented(serviceName) != nil {
		t.Errorf("a Tenant's pair is presented for the pool Service's name %s", serviceName)
	}
	if c := poolReady("brand"); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, serviceName+" (the pool's own: "+serviceName+")") ||
		!strings.Contains(c.Message, "*."+ns+".svc (the pool's own: shared-pool") ||
		!strings.Contains(c.Message, "pool.storybus.example (the pool's own: pool.storybus.example)") {
		t.Errorf("PoolReady %+v: want the pool Service's name, a wildcard over it and the pool certificate's name named as not presented", c)
	}
	e, err := sp.Documents.Get(ctx, "brand")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := config.Parse(e.Value())
	if err != nil || doc.TLS == nil || doc.TLS.Key == "" {
		t.Fatalf("the document carries no key pair: %v", err)
	}
	waitCondition(t, ns, "brand", &v1alpha1.Tenant{}, tenantGen, v1alpha1.ConditionCertificateReady, metav1.ConditionTrue, v1alpha1.ReasonCertificateIssued)

	// A younger Tenant claiming brand's name gets only its own.
	time.Sleep(1100 * time.Millisecond) // a later creation second
	rivalSec, rivalSerial := keyPairSecret("rival-pair", "news.brand.example", "rival.brand.example", "*.brand.example")
	create(t, rivalSec)
	create(t, newTenant(ns, "rival", onPool("shared")))
	eventually(t, "rival gets its own name, not brand's nor a wildcard over it", func() error {
		if got := hostNames("rival"); !slices.Equal(got, []string{"rival.brand.example"}) {
			return fmt.Errorf("status.pool.hostNames %v", got)
		}
		if c := poolReady("rival"); c == nil || !strings.Contains(c.Message, "news.brand.example (held by Tenant "+ns+"/brand as news.brand.example)") ||
			!strings.Contains(c.Message, "*.brand.example (held by Tenant "+ns+"/brand as news.brand.example)") {
			return fmt.Errorf("PoolReady %+v", c)
		}
		if got := presented("rival.brand.example"); got == nil || got.Cmp(rivalSerial) != 0 {
			return fmt.Errorf("presented %v for rival.brand.example", got)
		}
		return nil
	})
	if got := presented("news.brand.example"); got == nil || got.Cmp(brandSerial) != 0 {
		t.Errorf("news.brand.example presented %v, want brand's pair", got)
	}

	// A name is its holder's: brand, older, renews its pair with rival's
	// name, and does not get it.
	renewed, renewedSerial := keyPairSecret("brand-pair", "news.brand.example", "rival.brand.example")
	update(t, ns, "brand-pair", &corev1.Secret{}, func(s *corev1.Secret) { s.Data = renewed.Data })
	eventually(t, "the renewed pair is presented, for brand's own name only", func() error {
		if got := presented("news.brand.example"); got == nil || got.Cmp(renewedSerial) != 0 {
			return fmt.Errorf("presented %v", got)
		}
		if got := hostNames("brand"); !slices.Equal(got, []string{"news.brand.example"}) {
			return fmt.Errorf("status.pool.hostNames %v", got)
		}
		return nil
	})
	if got := presented("rival.brand.example"); got == nil || got.Cmp(rivalSerial) != 0 {
		t.Errorf("rival.brand.example presented %v, want rival's pair: an older Tenant took a held name", got)
	}

	// On a pool serving plain HTTP, placed without its pair, and said so.
	create(t, newTenant(ns, "plainbrand", onPool("plain")))
	eventually(t, "a key pair on a plain HTTP pool is explained", func() error {
		if c := poolReady("plainbrand"); c == nil || c.Reason != v1alpha1.ReasonPlaced || !strings.Contains(c.Message, "serves plain HTTP") {
			return fmt.Errorf("PoolReady %+v", c)
		}
		return nil
	})

	// brand goes: rival gets the name.
	if err := k8s.Delete(ctx, newTenant(ns, "brand")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rival gets news.brand.example once brand is gone", func() error {
		if got := hostNames("rival"); !slices.Equal(got, []string{"news.brand.example", "rival.brand.example", "*.brand.example"}) {
			return fmt.Errorf("status.pool.hostNames %v", got)
		}
		if got := presented("news.brand.example"); got == nil || got.Cmp(rivalSerial) != 0 {
			return errors.New("news.brand.example is not presented with rival's pair")
		}
		return nil
	})

	// rival leaves the pool: a Tenant waiting for its name gets it.
	lateSec, lateSerial := keyPairSecret("late-pair", "rival.brand.example")
	create(t, lateSec)
	create(t, newTenant(ns, "late", onPool("shared")))
	eventually(t, "late waits for rival's name", func() error {
		if c := poolReady("late"); c == nil || !strings.Contains(c.Message, "held by Tenant "+ns+"/rival") {
			return fmt.Errorf("PoolReady %+v", c)
		}
		return nil
	})
	update(t, ns, "rival", &v1alpha1.Tenant{}, func(tn *v1alpha1.Tenant) { tn.Spec.Pool.Name = "plain" })
	eventually(t, "late gets the name rival took away", func() error {
		if got := hostNames("late"); !slices.Equal(got, []string{"rival.brand.example"}) {
			return fmt.Errorf("status.pool.hostNames %v", got)
		}
		if got := presented("rival.brand.example"); got == nil || got.Cmp(lateSerial) != 0 {
			return errors.New("rival.brand.example is not presented with late's pair")
		}
		return nil
	})
}

// TestKeyPairNoteIsBounded: a certificate of many names the Tenant may
// not claim is summed up, so that PoolReady's message stays within a
// condition's limit.
func TestKeyPairNoteIsBounded(t *testing.T) {
	var taken []string
	for i := range 500 {
		taken = append(taken, fmt.Sprintf("host-%03d.brand.example (held by Tenant news/other as host-%03d.brand.example)", i, i))
	}
	note := keyPairNote(&config.WorkspaceTLS{Hosts: []string{"news.brand.example"}}, taken)
	if !strings.Contains(note, "host-009.brand.example") || strings.Contains(note, "host-010.brand.example") || !strings.HasSuffix(note, "and 490 more: the pool's key pair answers those") {
		t.Errorf("note %q: want the first ten names and the count of the rest", note)
	}
	if len(note) > 2000 {
		t.Errorf("note of %d bytes", len(note))
	}
}

// TestPoolAdmitsTheHostNamesItListsForANamespace: with
// spec.tls.tenantHostnames a pooled Tenant's key pair is presented only for
// the names its namespace's entry covers, the rest are named in PoolReady
// as not admitted, and a change of the list is in force without a change
// of the Tenant.
func TestPoolAdmitsTheHostNamesItListsForANamespace(t *testing.T) {
	nats, st := startPoolCluster(t)
	ns := newNamespace(t)
	create(t, newBusPool(ns, "shared", nats.ClientURL(), func(p *v1alpha1.BusPool) {
		p.Spec.TLS = &v1alpha1.BusPoolTLS{SecretName: "shared-pool-tls", TenantHostnames: []v1alpha1.TenantHostnames{
			{Namespace: ns, Hostnames: []string{"*.listed.example"}},
			{Namespace: "elsewhere", Hostnames: []string{"news.unlisted.example"}},
		}}
	}))
	replica, _ := serveSharedPool(t, ns, nats.ClientURL(), st, &v1alpha1.BusPool{})
	ca, err := certgen.NewCA("brands CA")
	if err != nil {
		t.Fatal(err)
	}
	secret := func(name string, hosts ...string) *corev1.Secret {
		p, err := ca.Sign(certgen.Leaf{CommonName: hosts[0], Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: p.CertPEM, corev1.TLSPrivateKeyKey: p.KeyPEM}}
	}
	create(t, secret("shared-pool-tls", "pool.storybus.example"))
	create(t, secret("brand-pair", "news.listed.example", "*.listed.example", "news.unlisted.example", "deep.news.listed.example"))
	create(t, newTenant(ns, "brand", func(tn *v1alpha1.Tenant) {
		tn.Spec.Pool = &v1alpha1.PoolReference{Name: "shared"}
		tn.Spec.TLS = &v1alpha1.TenantTLS{SecretName: "brand-pair"}
	}))
	tenant := func() (*v1alpha1.Tenant, *metav1.Condition) {
		tn := &v1alpha1.Tenant{}
		if err := get(ns, "brand", tn); err != nil || tn.Status.Pool == nil {
			return nil, nil
		}
		return tn, findCondition(tn.Status.Conditions, v1alpha1.ConditionPoolReady)
	}
	notAdmitted := func(n string) string {
		return n + " (not among the host names BusPool " + ns + "/shared admits for namespace " + ns + ")"
	}
	eventually(t, "only the names the pool admits for the namespace are brand's", func() error {
		tn, c := tenant()
		if tn == nil || !slices.Equal(tn.Status.Pool.HostNames, []string{"news.listed.example", "*.listed.example"}) {
			return fmt.Errorf("status.pool %+v", tn)
		}
		if c == nil || !strings.Contains(c.Message, notAdmitted("news.unlisted.example")) || !strings.Contains(c.Message, notAdmitted("deep.news.listed.example")) {
			return fmt.Errorf("PoolReady %+v", c)
		}
		if replica.srv.Hosts().Lookup("news.listed.example") == nil {
			return errors.New("news.listed.example is not presented with brand's pair")
		}
		return nil
	})
	if replica.srv.Hosts().Lookup("news.unlisted.example") != nil {
		t.Error("news.unlisted.example, listed for another namespace only, is presented with brand's pair")
	}

	// The pool admits the name for this namespace too: in force, the
	// Tenant unchanged.
	update(t, ns, "shared", &v1alpha1.BusPool{}, func(p *v1alpha1.BusPool) {
		p.Spec.TLS.TenantHostnames[0].Hostnames = append(p.Spec.TLS.TenantHostnames[0].Hostnames, "news.unlisted.example")
	})
	eventually(t, "a name the pool now admits is presented", func() error {
		tn, _ := tenant()
		if tn == nil || !slices.Equal(tn.Status.Pool.HostNames, []string{"news.listed.example", "*.listed.example", "news.unlisted.example"}) {
			return fmt.Errorf("status.pool %+v", tn)
		}
		if replica.srv.Hosts().Lookup("news.unlisted.example") == nil {
			return errors.New("news.unlisted.example is not presented")
		}
		return nil
	})

	// The API server refuses a host name that is not one.
	err = k8s.Create(context.Background(), newBusPool(ns, "bad", nats.ClientURL(), func(p *v1alpha1.BusPool) {
		p.Spec.TLS = &v1alpha1.BusPoolTLS{SecretName: "x", TenantHostnames: []v1alpha1.TenantHostnames{{Namespace: ns, Hostnames: []string{"News.Example"}}}}
	}))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "tenantHostnames") {
		t.Errorf("a BusPool admitting News.Example: %v, want Invalid naming tenantHostnames", err)
	}
}
