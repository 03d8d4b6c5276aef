// Package samples embeds the sample custom resources a platform team
// applies with `kubectl apply -k config/samples`, and names what they hold:
// workspace "newsroom" with the connections "cms" and "wire" and fixed
// development secrets (the workspace `storybus dev` serves, package dev).
package samples

// Development secrets of the sample connections. They are public: never
// use them outside a development machine.
const (
	CMSClientID   = "cms"
	CMSSecret     = "cms-dev-secret-0123456789abcdef0"
	WireClientID  = "wire"
	WireSecret    = "wire-dev-secret-0123456789abcdef"
	WorkspaceID   = "newsroom"
	MessageSample = `{"som_version":"1.0","message_id":"6f1c2a9e-4b7d-4e21-9a3f-0c5d8e7b1a20","message_type":"story.context","system_id":"cms","timestamp":"2026-11-29T09:00:00Z","payload":{"story_id":"story-0001","sequence_number":1,"state":"draft","headline":"Council approves new harbour bridge","desk":"local","language":"en"}}`
)
