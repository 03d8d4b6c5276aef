package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/storybus/storybus/api/v1alpha1"
	"github.com/storybus/storybus/controllers"
	"github.com/storybus/storybus/internal/buildinfo"
	"github.com/storybus/storybus/internal/testutil"
)

// TestOperatorRuns runs `storybus operator`'s manager against a real API
// server: it takes the leader Lease, serves /healthz, /readyz and
// /metrics, reconciles a Tenant into a StatefulSet of the --bus-image, and
// stops cleanly when its context ends. /metrics answers over HTTPS only to
// a client whose token the API server authenticates and authorises: 401
// without a token, 403 for a ServiceAccount without the right, 200 for one
// bound to a role granting get on /metrics; a token the API server rejects
// gets no metrics either.
func TestOperatorRuns(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("envtest needs %s in %s (KUBEBUILDER_ASSETS or bin/): run `make tools` to build it", bin, assets)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	metrics, health := testutil.FreeAddr(t), testutil.FreeAddr(t)
	o := OperatorOptions{
		MetricsBindAddress:      metrics,
		MetricsSecure:           true,
		HealthProbeBindAddress:  health,
		LeaderElect:             true,
		LeaderElectionID:        "storybus-operator-test",
		LeaderElectionNamespace: "default",
		BusImage:                "registry.example/storybus:smoke",
		ClusterDomain:           "cluster.local",
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs testutil.SyncBuffer
	go func() {
		done <- RunOperator(ctx, o, cfg, logr.FromSlogHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{ReplaceAttr: namedLevels})))
	}()
	t.Cleanup(cancel)

	scheme, err := controllers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	poll := func(what string, f func() error) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			err := f()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The metrics endpoint's certificate is self-signed.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	getAs := func(url, token string, status int, want string) func() error {
		return func() error {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != status || !strings.Contains(string(b), want) {
				return fmt.Errorf("%s: %d %.200s, want %d", url, resp.StatusCode, b, status)
			}
			return nil
		}
	}
	get := func(url, want string) func() error { return getAs(url, "", http.StatusOK, want) }
	poll("healthz", get("http://"+health+"/healthz", "ok"))
	poll("readyz", get("http://"+health+"/readyz", "ok"))
	poll("leader lease", func() error {
		var l coordinationv1.Lease
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: o.LeaderElectionID}, &l); err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return fmt.Errorf("no holder")
		}
		return nil
	})
	tn := &v1alpha1.Tenant{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "smoke"}}
	if err := c.Create(ctx, tn); err != nil {
		t.Fatal(err)
	}
	poll("statefulset of the bus image", func() error {
		var sts appsv1.StatefulSet
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "smoke-bus"}, &sts); err != nil {
			return err
		}
		if img := sts.Spec.Template.Spec.Containers[0].Image; img != o.BusImage {
			return fmt.Errorf("image %s", img)
		}
		return nil
	})
	reader, stranger := serviceAccountToken(t, ctx, c, "scraper"), serviceAccountToken(t, ctx, c, "stranger")
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "scraper"}},
		},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	url := "https://" + metrics + "/metrics"
	poll("metrics to an authorised ServiceAccount", getAs(url, reader, http.StatusOK, `controller_runtime_reconcile_total{controller="tenant-workload"`))
	build := buildinfo.Get()
	poll("build info metric", getAs(url, reader, http.StatusOK, fmt.Sprintf(`storybus_build_info{commit=%q,goversion=%q,version=%q} 1`, build.Commit, build.GoVersion, build.Version)))
	poll("metrics without a token", getAs(url, "", http.StatusUnauthorized, ""))
	// A token the API server rejects: controller-runtime's filter answers
	// 500 "Authentication failed" (its authenticator reports the rejection
	// as an error), and serves nothing.
	poll("metrics with a token the API server does not know", getAs(url, "not-a-token", http.StatusInternalServerError, "Authentication failed"))
	poll("metrics to a ServiceAccount without the right", getAs(url, stranger, http.StatusForbidden, ""))
	if err := getAs("http://"+metrics+"/metrics", "", http.StatusOK, "controller_runtime")(); err == nil {
		t.Error("metrics served over plain HTTP")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("operator stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("operator did not stop")
	}
	start := fmt.Sprintf(`"msg":"storybus operator starting","version":%q,"commit":%q,"goVersion":%q`, build.Version, build.Commit, build.GoVersion)
	if !strings.Contains(logs.String(), start) {
		t.Errorf("no start line with the build, %s, in the logs:\n%s", start, logs.String())
	}
	// A normal stop is no error: reconciles it cuts short included. The
	// one ERROR expected is controller-runtime's for the rejected token.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) && !strings.Contains(line, `"err":"invalid bearer token"`) {
			t.Errorf("logged an ERROR: %s", line)
		}
	}
}

// serviceAccountToken creates the ServiceAccount name in default and
// returns a token the API server issued for it.
func serviceAccountToken(t *testing.T, ctx context.Context, c client.Client, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("token of ServiceAccount %s: %v", name, err)
	}
	return tr.Status.Token
}
