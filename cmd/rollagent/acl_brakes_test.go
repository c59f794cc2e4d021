package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rollagent/rollagent/coordinator"
	"github.com/rollagent/rollagent/lockstep"
)

// A CANCEL and an operator's pause are brakes that only an operator can
// release: with the shipped agent policy, a node's token may neither
// delete nor overwrite one, alone or in a transaction that also touches
// desired (as a real release does, to wake the waiters), and Consul
// writes nothing of such a transaction: the gate stays closed and KV is as
// it was. The same token still grants slots (TestAgentPolicyIsEnough),
// and the operator's token lifts the pause.
func TestAgentTokenCannotReleaseABrake(t *testing.T) {
	srv := aclConsul(t)
	c := srv.Client()
	tests := []struct {
		name, group string
		brake       []string // the operator's command, after the group
		state       coordinator.GateState
		key         func(k coordinator.Keys, sha string) string
	}{
		{"cancel", "web", []string{"cancel"}, coordinator.GateCancelled, coordinator.Keys.Cancel},
		{"operator pause", "api", []string{"pause"}, coordinator.GatePaused,
			func(k coordinator.Keys, _ string) string { return k.OperatorPause() }},
	}
	ops := map[string]string{}
	for _, tc := range tests {
		ops[tc.group] = tokenForNode(t, c, "acl-operator.hcl", tc.group, "n1")
		t.Run(tc.name, func(t *testing.T) {
			if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", tc.group, "-f", "testdata/noname.json"); code != 0 {
				t.Fatal(errs)
			}
			args := append([]string{"--token=" + ops[tc.group]}, tc.brake...)
			if code, _, errs := runCLI(t, srv.HTTPAddr, append(args, tc.group, "--reason=stop")...); code != 0 {
				t.Fatalf("%s with the operator's token: %s", tc.name, errs)
			}
			root := coordinator.NewStore(c, "")
			gs, err := root.Read(t.Context(), tc.group, nil)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := root.Keys(tc.group)
			key := tc.key(k, gs.Desired.SHA)
			agent := clientWith(t, srv.HTTPAddr, tokenForNode(t, c, "acl-policy.hcl", tc.group, "n1"))
			before := kvSnapshot(t, c)
			release := map[string]func() error{
				"delete": func() error { _, err := agent.KV().Delete(key, nil); return err },
				"overwrite": func() error {
					_, err := agent.KV().Put(&api.KVPair{Key: key, Value: []byte(`{"sha":"` + gs.Desired.SHA + `"}`)}, nil)
					return err
				},
				"delete and touch desired": func() error {
					d := gs.DesiredPair
					return txnErr(agent.Txn().Txn(api.TxnOps{
						{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: d.Key, Value: d.Value, Flags: d.Flags + 1, Index: d.ModifyIndex}},
						{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: key}},
					}, nil))
				},
			}
			for name, try := range release {
				t.Run(name, func(t *testing.T) {
					if err := try(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
						t.Fatalf("%s of %s with n1's token: %v; want permission denied", name, key, err)
					}
					kvUnchanged(t, c, before)
				})
			}
			after, err := root.Read(t.Context(), tc.group, nil)
			if err != nil {
				t.Fatal(err)
			}
			if v := after.Gate(); v.State != tc.state {
				t.Fatalf("gate after the agent's tries: %s (%s), want %s", v.State, v.Reason, tc.state)
			}
		})
	}
	t.Run("the operator resumes", func(t *testing.T) {
		if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+ops["api"], "resume", "api"); code != 0 {
			t.Fatal(errs)
		}
		gs, err := coordinator.NewStore(c, "").Read(t.Context(), "api", nil)
		if err != nil || !gs.Gate().Open {
			t.Fatalf("gate after resume: %+v, %v", gs.Gate(), err)
		}
	})
}

// Nor may a node's token set a brake where none is: with the shipped
// agent policy it can write neither a CANCEL nor an operator's pause (nor
// either at the key older agents read), by a plain put, a put that only
// creates, or a transaction that touches desired as a real one does, and
// `rollagent pause` with it exits non-zero saying permission denied. Consul
// keeps nothing of any try and the gate stays open.
func TestAgentTokenCannotSetABrake(t *testing.T) {
	srv, c, root := aclRoot(t)
	if code, _, errs := runCLI(t, srv.HTTPAddr, "--token="+rootToken, "commit", "web", "-f", "testdata/noname.json"); code != 0 {
		t.Fatal(errs)
	}
	gs, err := root.Read(t.Context(), "web", nil)
	if err != nil || !gs.Gate().Open {
		t.Fatalf("gate after the commit: %+v, %v; want open", gs.Gate(), err)
	}
	k, _ := root.Keys("web")
	sha := gs.Desired.SHA
	n1 := tokenForNode(t, c, "acl-policy.hcl", "web", "n1")
	agent := clientWith(t, srv.HTTPAddr, n1)
	value := []byte(`{"sha":"` + sha + `","reason":"stop"}`)
	tries := map[string]func() error{
		"rollagent pause": func() error {
			errs := refused(t, srv, "ermission denied", "--token="+n1, "pause", "web", "--reason=stop")
			return errorString(errs)
		},
	}
	brakes := map[string]string{"a cancel": k.Cancel(sha), "an operator pause": k.OperatorPause(),
		"an older cancel": k.LegacyCancel(sha), "an older pause": k.LegacyOperatorPause(sha)}
	for name, key := range brakes {
		tries["put "+name] = func() error {
			_, err := agent.KV().Put(&api.KVPair{Key: key, Value: value}, nil)
			return err
		}
		tries["create "+name] = func() error {
			_, _, err := agent.KV().CAS(&api.KVPair{Key: key, Value: value, ModifyIndex: 0}, nil)
			return err
		}
		tries["put "+name+" and touch desired"] = func() error {
			return txnErr(agent.Txn().Txn(lockstep.CloseOps(gs.DesiredPair, key, value), nil))
		}
	}
	deniedTries(t, c, "n1's token", tries)
	if after, err := root.Read(t.Context(), "web", nil); err != nil || !after.Gate().Open {
		t.Fatalf("gate after the agent's tries: %+v, %v; want open", after.Gate(), err)
	}
}

// deniedTries runs each try, named, as a subtest, and wants Consul's
// permission denied and KV as it was before the try.
func deniedTries(t *testing.T, c *api.Client, who string, tries map[string]func() error) {
	t.Helper()
	for name, try := range tries {
		t.Run(name, func(t *testing.T) {
			before := kvSnapshot(t, c)
			if err := try(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission denied") {
				t.Fatalf("%s with %s: %v; want permission denied", name, who, err)
			}
			kvUnchanged(t, c, before)
		})
	}
}

// txnErr is the error of a transaction's answer: one Consul rolled back
// is an error naming why.
func txnErr(ok bool, resp *api.TxnResponse, _ *api.QueryMeta, err error) error {
	if err != nil || ok {
		return err
	}
	var msgs []string
	for _, e := range resp.Errors {
		msgs = append(msgs, e.What)
	}
	return errors.New("transaction rolled back: " + strings.Join(msgs, "; "))
}
