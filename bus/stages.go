package bus

import (
	"github.com/storybus/storybus/rules"
)

// stage is one step of a route's pipeline.
type stage struct {
	name string
	run  func(*request) outcome
}

// outcome is what a stage decided. The zero outcome lets the request go on;
// refusals refuse it with those violations; answered means the stage wrote
// the answer itself (API Gateway's 403 on the iam routes), and nothing more
// is written.
type outcome struct {
	refusals []rules.Violation
	answered bool
}

// refused is the outcome that refuses the request with vs; with none, the
// request goes on.
func refused(vs ...rules.Violation) outcome { return outcome{refusals: vs} }

// pipelines are the stage lists of the routes, each declared whole by its
// route and built once by New.
type pipelines struct {
	publish, publishIAM, pull, ack []stage
}

// runStages runs stages in order until one stops the request, and answers
// its refusal. It reports whether every stage let the request go on.
func (s *Server) runStages(r *request, stages []stage) bool {
	defer noteRequest(r)
	for _, st := range stages {
		_, span := startSpan(r.c.Request.Context(), st.name)
		out := st.run(r)
		if span != nil {
			endStageSpan(span, out)
		}
		switch {
		case out.answered:
			return false
		case len(out.refusals) > 0:
			if r.body == nil && r.c.Request.ContentLength != 0 {
				// Refused before its body was read: end the connection
				// rather than read the body to keep it.
				r.c.Header("Connection", "close")
			}
			s.holdRefusal(r, out.refusals[0].Rule, r.retry)
			refuse(r.c, r.retry, out.refusals...)
			return false
		}
	}
	return true
}

// publishStages are the publish route's stages 2 to 9 of SPEC §3.2, with
// the bearer token as stage 3, then the workspace's capacity (admit) and a
// sandbox's provoked answers; the publish core runs stages 10 to 13.
//
// The request's declared size is checked first, but its body is read only
// once its token is verified, so that a client without credentials makes
// the bus hold none of its bytes.
func (s *Server) publishStages() []stage {
	return append([]stage{
		{"size", declaredSize},
		{"authentication", s.authenticate},
		{"workspace capacity", s.admit},
		{"body", s.readBody},
	}, s.messageStages()...)
}

// publishIAMStages are the AWS-signed publish route's: an AWS Signature V4
// covers the body, so the body is read (from a pool of its own) before the
// signature is verified.
func (s *Server) publishIAMStages() []stage {
	return append([]stage{
		{"size", s.readSignedBody},
		{"authentication", s.authenticateIAM},
		{"workspace capacity", s.admit},
	}, s.messageStages()...)
}

// messageStages are the publish routes' stages once the body is read: a
// sandbox's provoked answers, the gate (stages 4 to 6, with the daily
// quota), the parse, SOM validation and the grants (stages 7 to 9).
func (s *Server) messageStages() []stage {
	return []stage{
		{"sandbox answer", s.sandboxAnswer},
		{"connection, firewall and limits", s.gate},
		{"parse", parse},
		{"som", validate},
		{"grants", s.grants},
	}
}
