# Stage 5: the workspace's firewall rules on the request.
package storybus.firewall

fw := object.get(data.workspace, "firewall", {})

default refusal := null

refusal := blocked("client address %s is not allowed", [input.request.client_ip]) if {
	count(object.get(fw, "allowedCIDRs", [])) > 0
	not client_allowed
} else := blocked("content type %q is not allowed", [input.request.media_type]) if {
	allowed := object.get(fw, "contentTypes", [])
	count(allowed) > 0
	not input.request.media_type in allowed
} else := blocked("JSON nesting of %d levels is deeper than the %d allowed", [input.request.json_depth, fw.maxJSONDepth]) if {
	fw.maxJSONDepth > 0
	input.request.json_depth > fw.maxJSONDepth
} else := blocked("the body matches a blocked pattern", []) if {
	some pattern in object.get(fw, "blockedPatterns", [])
	regex.match(pattern, input.request.body)
}

client_allowed if {
	some cidr in fw.allowedCIDRs
	net.cidr_contains(cidr, input.request.client_ip)
}

blocked(format, args) := {"rule": "request.blocked", "message": sprintf(format, args)}
