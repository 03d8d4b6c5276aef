package bus

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/storybus/storybus/bus/rules"
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
