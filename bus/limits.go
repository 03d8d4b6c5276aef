package bus

import "github.com/storybus/storybus/bus/rules"

// limit is stage 6: the connection's rate limit and daily quota.
func (s *Server) limit(r *request) []rules.Violation {
	return nil
}
