# Consul ACL policy for the agent of ONE node of ONE group (`rollagent run
# --group web --node n1`), tested in cmd/rollagent/acl_test.go. Make one
# per node: replace "web" with the group, "n1" in "nodes/n1", "stopped/n1",
# "events/node/n1/", "slot/.holders/n1/" and "slot/c/n1/" with the node's
# --node, and session "n1" and agent "n1" with its Consul agent's node name
# (`consul members`; often the same as --node).
#
# What it lets the agent do, and nothing more:
#   - read its group's state;
#   - put the services its specs drain (update.drain) into maintenance;
#   - write its own node's record and stop index key, its own part of the
#     event log, its own keys in the slot (lockstep semaphore), and the
#     records all agents of the group share: the slot's holders record and
#     tail, failures and their counter, failure pauses, the record that a
#     commit's progress deadline passed (deadline/, written once per
#     commit, by the first agent that sees it pass), and the mark of the
#     last full read of the node records (downcheck);
#   - write desired, which every pause touches (that is how a pause wakes
#     every waiter) and which failure_action=rollback moves.
# What it may not: write brakes/, where an operator's CANCEL and pause
# are (`rollagent cancel`, `rollagent pause`), so it can neither lift nor
# forge one; write converged/, which only commits write (they read the
# whole group to tell a SHA converged on every node); write canaries/ or
# promoted/, so it can neither choose the canaries of a rollout nor
# promote one past them (`rollagent promote`; auto_promote writes no
# record: each agent judges the canaries' health itself); write history/,
# which `rollagent commit`, `rollagent rollback`, `rollagent resume` and
# `rollagent cancel` all write, so each is refused with this token, and it
# cannot put a new spec in front of the fleet; nor write another node's
# record or slot keys, or anything of another group. A policy from before brakes/ also
# let agents write cancel/: remove that line, so that a CANCEL left there
# from then holds too.
#
# What a stolen agent token can still do with raw Consul requests, as
# Consul's ACLs cannot tell one write of a key from another: stop its
# group (write a failure pause and touch desired, or set desired to
# garbage), make desired an earlier SHA already in history (what
# failure_action=rollback does; marked as its rollback, past the canaries
# of a SHA that converged on every node since its latest canary stage
# began, which converged/ records newer than canaries/, with no pause or
# failure of it since), write failures in another node's name, write any
# domain into its own node's record, write the mark of the last full read
# of the records (downcheck) so that a stop mark written without the stop
# index, by an agent from before it or under a policy without the
# stopped/ rule, is not counted by any reader of the group (grants,
# auto_promote, status) while it keeps doing so (agents of this version
# under this policy write the index), rewrite the slot's holders record,
# which every agent rewrites at each grant and release (drop another
# node's claim from it, say, so that a node that died mid-step no longer
# counts against max_parallel),
# or write and delete events in its own part of the log (`rollagent
# history` shows them as its claims); and, since write includes delete,
# delete a failure pause or the failure records and touch desired, which
# sets moving again a SHA its failures stopped (an operator who wants a
# brake no node can release uses `rollagent pause` or `rollagent
# cancel`); write a deadline record early, which applies failure_action
# as the deadline passing would, or one that keeps a commit's deadline
# from passing. It may also register an instance of its group's service in
# another node's name, which counts only on the Consul node that node's
# record names (README, Guarantees and limits); and put the services its
# specs drain into maintenance, lift an operator's maintenance of them, or
# register and deregister their instances (service write), which takes
# them out of traffic but moves no rollout. It cannot start a
# spec that was never committed, nor move a SHA an operator cancelled or
# paused. Automatic rollback needs nothing more than a pause does, so
# there is no line to add or remove for it.
key_prefix "rollagent/groups/web/" {
  policy = "read"
}
key "rollagent/groups/web/nodes/n1" {
  policy = "write"
}
key "rollagent/groups/web/desired" {
  policy = "write"
}
# Its stop index key, which it writes with the stop mark in its record, so
# that the head of the line finds stopped nodes without reading every
# record; and the mark of the last full read of the records, which all
# agents of the group share (docs/kv-layout.md, "stopped/"). Without
# these two lines (a policy from before them) the agent works as before,
# says so once in its log, and every grant of the group reads every node
# record.
key "rollagent/groups/web/stopped/n1" {
  policy = "write"
}
key "rollagent/groups/web/downcheck" {
  policy = "write"
}
# The slot: the keys lockstep writes (docs/kv-layout.md), nothing else
# under slot/, so that no key a reader does not expect can be put there.
# The holders record, its slot keys and the line's tail are shared by all agents; holder
# and contender keys are named by session, which a policy cannot name,
# under the node's name, which it can: each node writes its own alone
# (readers bound what they take from them, see "What a reader accepts").
# A policy from before gave every node "slot/.holders/" and "slot/c/":
# replace those two lines (README, Upgrading to per-node slot keys).
key "rollagent/groups/web/slot/.holders" {
  policy = "write"
}
key "rollagent/groups/web/slot/.tail" {
  policy = "write"
}
# The slot keys: one per holder, shared by all agents like the holders
# record (lockstep/doc.go, "Slot keys"). Add this line before agents of
# the version that writes them run: without it their grants are refused.
key_prefix "rollagent/groups/web/slot/.holders/.slots/" {
  policy = "write"
}
key_prefix "rollagent/groups/web/slot/.holders/n1/" {
  policy = "write"
}
key_prefix "rollagent/groups/web/slot/c/n1/" {
  policy = "write"
}
key_prefix "rollagent/groups/web/failures/" {
  policy = "write"
}
key_prefix "rollagent/groups/web/failcount/" {
  policy = "write"
}
key_prefix "rollagent/groups/web/pause/" {
  policy = "write"
}
key_prefix "rollagent/groups/web/deadline/" {
  policy = "write"
}
# Its own part of the event log: an operator's part, or another node's,
# it may neither forge nor prune.
key_prefix "rollagent/groups/web/events/node/n1/" {
  policy = "write"
}
# The groups its specs name in update.after ("managers" here): the agent
# reads each one's desired record, its spec and every node's record (and
# its service's catalog, which service_prefix below covers) to tell it has
# converged. One rule per group named; none if the specs name none. A group
# the token may not read holds the rollout, and the gate says why.
key_prefix "rollagent/groups/managers/" {
  policy = "read"
}
# Its sessions, which its Consul agent creates on its own node.
session "n1" {
  policy = "write"
}
# Its service rollagent-<group>, with the workload check, the session's
# check (with --health-addr=off) and the alias of its liveness check
# (service write covers them).
service "rollagent-web" {
  policy = "write"
}
# Its instance of the service "rollagent" (rollagent-web-n1:alive), which
# carries the liveness check its session is bound to: a service of its own,
# whose tags never change, so that each Consul agent's anti-entropy does not
# write the check to the catalog again at every full sync, as it would on
# rollagent-<group>, whose tags follow the node's state. Without this rule
# (a policy from before it) the agent says so once in its log and puts the
# check on rollagent-<group>, as before. Service rules go by name, and
# every agent's instance has this one: on a Consul agent that carries nodes
# of several groups, a stolen token of one can deregister another group's
# node's instance there, which ends that node's session and counts it down
# until its agent next makes a session (which registers it again), or
# replace it with one whose check always passes, which ends that session
# too and then hides the agent's death from the count of nodes down (as
# a token of the node's own group can already do with rollagent-<group>).
# On its own Consul node, such a token can also register an instance in
# another group's name with a failing check: Down counts an alive instance
# only for a node of the group with a record, on the Consul node that
# record names (consul_node), so it can count no made-up node down, nor a
# real one whose record names its Consul node.
service "rollagent" {
  policy = "write"
}
# The services update.drain names ("frontend" here), which the agent puts
# into maintenance on its own Consul agent before the old workload stops
# and takes out again after: Consul's /v1/agent/service/maintenance needs
# service write. One rule per name the group's specs drain; none if they
# drain none. Write also lets the token register and deregister instances
# of that service, which nothing of rollagent does.
service "frontend" {
  policy = "write"
}
# The health of what a spec blocks on (update.block_on and block_on_node):
# any service's and node's checks. Narrow it to the services the group's
# specs name (service "postgres" { policy = "read" }) if you like; a check
# the token may not read keeps the gate closed, and says so.
service_prefix "" {
  policy = "read"
}
# Whether the other nodes' hosts are up (serfHealth), at the head of the
# line, and the nodes' meta in the catalog, for update.max_parallel_per's
# domains; it registers no node-level check.
node_prefix "" {
  policy = "read"
}
# Its Consul agent's node name (/v1/agent/self), which its record carries,
# so that its host going down counts it as down even after a clean stop
# took its service out of the catalog. Same name as the session rule.
agent "n1" {
  policy = "read"
}
