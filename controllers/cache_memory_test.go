package controllers

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/storybus/storybus/api/v1alpha1"
)

// TestUnrelatedSecretsStayOutOfMemory proves the operator holds only the
// metadata of the Secrets it did not make: 1,000 Secrets of 10 KiB in a
// namespace it watches (10 MiB of data) leave its heap within a few MiB.
// The operator runs in this process, so the heap measured is the test's
// too; it is read after a collection, before and after the Secrets, and
// the Secrets' watch events are known to have reached the operator when a
// Secret created after them has.
func TestUnrelatedSecretsStayOutOfMemory(t *testing.T) {
	ns := newNamespace(t)
	// The Tenant names a TLS Secret that does not exist yet: the watch of
	// the Secrets the operator did not make reports it when it appears,
	// after every Secret created before it.
	create(t, newTenant(ns, "heap", func(tn *v1alpha1.Tenant) { tn.Spec.TLS = &v1alpha1.TenantTLS{SecretName: "last"} }))
	tn := &v1alpha1.Tenant{}
	eventually(t, "the TLS Secret reported missing", func() error {
		if err := get(ns, "heap", tn); err != nil {
			return err
		}
		if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionCertificateReady); c == nil || !strings.Contains(c.Message, "does not exist") {
			return fmt.Errorf("CertificateReady %+v", c)
		}
		return nil
	})

	before := liveHeap()
	const n, size = 1000, 10 << 10
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				sec := &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("unrelated-%04d", i)},
					Data:       map[string][]byte{"blob": []byte(strings.Repeat(string(rune('a'+i%26)), size))},
				}
				if err := k8s.Create(context.Background(), sec); err != nil {
					t.Errorf("create %s: %v", sec.Name, err)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "last"}, Data: map[string][]byte{corev1.TLSCertKey: []byte("x")}})
	eventually(t, "the TLS Secret seen", func() error {
		if err := get(ns, "heap", tn); err != nil {
			return err
		}
		if c := findCondition(tn.Status.Conditions, v1alpha1.ConditionCertificateReady); c == nil || !strings.Contains(c.Message, "has no "+corev1.TLSPrivateKeyKey) {
			return fmt.Errorf("CertificateReady %+v", c)
		}
		return nil
	})
	after := liveHeap()
	grown := int64(after) - int64(before)
	t.Logf("heap %d MiB before %d Secrets of %d KiB, %d MiB after: %+.1f MiB", before>>20, n, size>>10, after>>20, float64(grown)/(1<<20))
	if limit := int64(4 << 20); grown > limit {
		t.Errorf("the heap grew by %.1f MiB with %d unrelated Secrets (%d MiB of data), more than %d MiB: the operator holds them", float64(grown)/(1<<20), n, n*size>>20, limit>>20)
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
