package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/storybus/storybus/docs"
)

// The operations port: what the bus has loaded, /healthz, /readyz,
// /configz and /metrics, and the reports of configuration and key pair
// loads behind them.

// LoadedConfig is one workspace's entry in the /configz answer.
type LoadedConfig struct {
	// Workspace is the workspace id.
	Workspace string `json:"workspace"`
	// ConfigHash is the hash of the configuration document in force
	// (config.DocumentHash of the file's bytes); empty for one built in
	// memory.
	ConfigHash string `json:"configHash"`
}

// LoadedConfigs returns the configuration in force for every workspace,
// ordered by workspace id.
func (s *Server) LoadedConfigs() []LoadedConfig {
	out := []LoadedConfig{}
	for id, ws := range *s.workspaces.Load() {
		out = append(out, LoadedConfig{Workspace: id, ConfigHash: ws.cfg.Load().Hash})
	}
	slices.SortFunc(out, func(a, b LoadedConfig) int { return strings.Compare(a.Workspace, b.Workspace) })
	return out
}

// OpsHandler returns the operations endpoints: /healthz, /readyz,
// /configz (the configurations in force, {"workspaces":[LoadedConfig…]}:
// the operator reads it to report what each bus pod has loaded), /metrics,
// and the API's description, /openapi.yaml, with the SOM schemas it refers
// to under /som/.
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
		// Still ready: a rejected configuration leaves the previous one
		// serving, and is reported here.
		errs := s.ConfigErrors()
		for _, label := range slices.Sorted(maps.Keys(errs)) {
			_, _ = fmt.Fprintf(w, "workspace %s: configuration rejected, previous one in force: %v\n", label, errs[label])
		}
	})
	mux.HandleFunc("/configz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Workspaces []LoadedConfig `json:"workspaces"`
		}{s.LoadedConfigs()})
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{Registry: s.metrics.Registry}))
	mux.HandleFunc("/"+docs.OpenAPIFile, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(docs.OpenAPI())
	})
	mux.HandleFunc("/som/{file}", func(w http.ResponseWriter, r *http.Request) {
		// Only the schemas: the name can neither climb out of som/ nor
		// name a directory.
		file := r.PathValue("file")
		b, err := fs.ReadFile(docs.Files(), "som/"+file)
		if !strings.HasSuffix(file, ".json") || err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/schema+json")
		_, _ = w.Write(b)
	})
	return mux
}

// StoreReadyGrace is how long a bus whose store answered stays ready
// while it does not: a NATS cluster electing its meta leader leaves every
// bus on it without answers for a few seconds at once, and readiness
// failing on all of them would leave their Service with no endpoint, so
// that producers meet refused connections instead of the 503 answers
// with Retry-After the bus gives meanwhile. A store that stays silent
// longer (a bus connected to a server cut off from the cluster, a cluster
// lost) fails readiness.
const StoreReadyGrace = 10 * time.Second

// Ready reports whether the bus can serve: it is not draining, at least
// one workspace is configured, and the store answers, or answered less
// than StoreReadyGrace ago.
func (s *Server) Ready(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("draining: the bus is stopping")
	}
	if len(*s.workspaces.Load()) == 0 {
		return errors.New("no workspace configured")
	}
	now := s.opts.Clock.Now()
	last := s.storeAnswered.Load()
	inGrace := last != 0 && now.Sub(time.Unix(0, last)) < StoreReadyGrace
	if inGrace {
		// Within the grace a slow answer is as good as none: the
		// check must not outlast the prober's own timeout (the
		// kubelet's is 1 s).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, storeQuickCheck)
		defer cancel()
	}
	if err := s.opts.Store.Ping(ctx); err != nil {
		if inGrace {
			return nil
		}
		return fmt.Errorf("store: %w", err)
	}
	s.storeAnswered.Store(now.UnixNano())
	return nil
}

// storeQuickCheck bounds the store's readiness check within
// StoreReadyGrace.
const storeQuickCheck = 300 * time.Millisecond

// ConfigLoaded reports the outcome of reloading a configuration file.
// workspace is the workspace id the file names, empty when it did not decode
// that far. A failure is logged, counted and shown on /readyz under the
// workspace id, or the file when the id is not known, while the previous
// configuration stays in force; a success clears it.
func (s *Server) ConfigLoaded(file, workspace string, err error) {
	label := workspace
	if label == "" {
		label = file
	}
	if s.loaded(file, label, err) {
		s.log.Error("workspace configuration rejected; the previous one stays in force", "workspace", workspace, "file", file, "error", err)
	}
}

// KeyPairLoaded reports the outcome of reloading the publish port's TLS key
// pair from certFile, as ConfigLoaded does for a configuration: a pair
// that did not load is logged, counted and shown on /readyz under
// certFile, and the previous pair keeps serving.
func (s *Server) KeyPairLoaded(certFile string, err error) {
	if s.loaded(certFile, certFile, err) {
		s.log.Error("TLS key pair rejected; the previous one stays in force", "source", certFile, "error", err)
	}
}

// loaded records a reload's outcome by source (a file), counted and shown
// under label, and reports whether it was a rejection.
func (s *Server) loaded(source, label string, err error) bool {
	s.rejectedMu.Lock()
	defer s.rejectedMu.Unlock()
	if err == nil {
		s.metrics.reloads.WithLabelValues(label).Inc()
		delete(s.rejected, source)
		return false
	}
	s.metrics.policyErr.WithLabelValues(label).Inc()
	if s.rejected == nil {
		s.rejected = map[string]rejection{}
	}
	s.rejected[source] = rejection{label: label, err: err}
	return true
}

// rejection is a file's last content that failed to load: a workspace
// configuration or a TLS key pair.
type rejection struct {
	// label is the workspace id, or the file when the id is not known.
	label string
	err   error
}

// ConfigErrors returns the last failed load of each source: by workspace
// id for a configuration (or its file, when the id is not known), by
// certificate file for a TLS key pair. The previous one keeps serving.
func (s *Server) ConfigErrors() map[string]error {
	out := map[string]error{}
	s.rejectedMu.Lock()
	defer s.rejectedMu.Unlock()
	for _, r := range s.rejected {
		out[r.label] = r.err
	}
	return out
}
