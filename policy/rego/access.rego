# Stage 4: may this connection publish here at all?
package storybus.access

conn := data.workspace.connections[input.connection]

default refusal := null

refusal := {
	"rule": "connection.inactive",
	"message": sprintf("connection %s is not active", [input.connection]),
} if {
	conn.active == false
} else := {
	"rule": "iam.role.unverified",
	"message": sprintf("the IAM role of connection %s is not yet verified by a workspace admin", [input.connection]),
} if {
	input.iam
	not conn.iam.verified
}
