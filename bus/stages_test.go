package bus

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/rules"
)

// TestRunStagesStopsAtTheFirstThatDecides: a stage that answered the
// request itself stops the pipeline with its answer alone; a refusal is
// answered in the refusal shape; later stages never run.
func TestRunStagesStopsAtTheFirstThatDecides(t *testing.T) {
	for _, tc := range []struct {
		name   string
		first  outcome
		status int
		body   string
		goesOn bool
	}{
		{"goes on", outcome{}, http.StatusOK, "", true},
		{"answered", outcome{answered: true}, http.StatusForbidden, `{"message":"answered by the stage"}`, false},
		{"refused", refused(rules.New(rules.AuthTokenMissing, "send a token", "")), http.StatusUnauthorized,
			`{"accepted":false,"violations":[{"source":"policy","rule":"auth.token.missing","message":"send a token"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(rec)
			c.Request = httptest.NewRequest(http.MethodPost, "/v1/tenants/newsroom/messages", nil)
			later := false
			stages := []stage{
				{"first", func(r *request) outcome {
					if tc.first.answered {
						writeJSON(r.c, http.StatusForbidden, AWSMessage{Message: "answered by the stage"})
					}
					return tc.first
				}},
				{"later", func(*request) outcome { later = true; return outcome{} }},
			}
			goesOn := (&Server{}).runStages(&request{c: c}, stages)
			if goesOn != tc.goesOn || later != tc.goesOn {
				t.Fatalf("went on %v, later stage ran %v; want %v", goesOn, later, tc.goesOn)
			}
			c.Writer.WriteHeaderNow()
			if rec.Code != tc.status || rec.Body.String() != tc.body {
				t.Fatalf("answer %d %s, want %d %s", rec.Code, rec.Body.String(), tc.status, tc.body)
			}
		})
	}
}

// TestEachRouteDeclaresItsStages: the routes' stage lists, in order. The
// consumer routes read no body before authentication either, take no slot
// of the workspace's capacity, and have gates of their own (the request
// rate alone, a bodiless pull judged as JSON).
func TestEachRouteDeclaresItsStages(t *testing.T) {
	s := New(Options{})
	names := func(stages []stage) []string {
		var out []string
		for _, st := range stages {
			out = append(out, st.name)
		}
		return out
	}
	message := []string{"sandbox answer", "connection, firewall and limits", "parse", "som", "grants"}
	for _, tc := range []struct {
		route  string
		stages []stage
		want   []string
	}{
		{"publish", s.pipelines.publish, append([]string{"size", "authentication", "workspace capacity", "body"}, message...)},
		{"publish iam", s.pipelines.publishIAM, append([]string{"size", "authentication", "workspace capacity"}, message...)},
		{"pull", s.pipelines.pull, []string{"authentication", "connection, firewall and limits"}},
		{"ack", s.pipelines.ack, []string{"size", "authentication", "body", "connection, firewall and limits"}},
	} {
		if got := names(tc.stages); !slices.Equal(got, tc.want) {
			t.Errorf("%s: stages %q, want %q", tc.route, got, tc.want)
		}
	}
}

// TestPullGateJudgesABodilessPullAsJSON: the firewall's content types are
// about bodies, so a pull without Content-Type passes as the JSON it
// answers with, and one that names a type is judged by it.
func TestPullGateJudgesABodilessPullAsJSON(t *testing.T) {
	for _, tc := range []struct{ contentType, want string }{
		{"", "application/json"},
		{"text/plain; charset=utf-8", "text/plain"},
	} {
		rec := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(rec)
		c.Request = httptest.NewRequest(http.MethodGet, "/v1/tenants/newsroom/consumers/desk/messages", nil)
		if tc.contentType != "" {
			c.Request.Header.Set("Content-Type", tc.contentType)
		}
		if got := pullMediaType(&request{c: c}); got != tc.want {
			t.Errorf("Content-Type %q: judged as %q, want %q", tc.contentType, got, tc.want)
		}
	}
}
