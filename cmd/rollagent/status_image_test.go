package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rollagent/rollagent/coordinator"
)

// Nodes that run one SHA from different images show in the table and in
// the JSON, with each node's image; nodes that report no image (the exec
// runtime) and agreeing nodes show no split.
func TestStatusShowsImageSplit(t *testing.T) {
	now := tableNow
	sha, other := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	idA, idB := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
	nodes := []coordinator.NodeState{
		{Node: "n1", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: now, ImageID: idA},
		{Node: "n2", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: now, ImageID: idB},
		{Node: "n3", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: now, ImageID: idA},
		{Node: "n4", SHA: sha, Desired: sha, State: coordinator.StateConverged, Since: now},
		{Node: "n5", SHA: other, Desired: sha, State: coordinator.StateWaiting, Since: now, ImageID: idB},
	}
	gs := &coordinator.GroupState{Group: "web", Desired: &coordinator.Desired{SHA: sha, CommittedAt: now}, Nodes: nodes}
	s := newStatusJSON(gs, statusOptions{LostAfter: time.Hour}, now)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Splits []struct {
			SHA    string `json:"sha"`
			Images []struct {
				ImageID string   `json:"image_id"`
				Nodes   []string `json:"nodes"`
			} `json:"images"`
		} `json:"image_splits"`
		Nodes []struct {
			Node    string `json:"node"`
			ImageID string `json:"image_id"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Splits) != 1 || doc.Splits[0].SHA != sha || len(doc.Splits[0].Images) != 2 ||
		doc.Splits[0].Images[0].ImageID != idA || strings.Join(doc.Splits[0].Images[0].Nodes, ",") != "n1,n3" ||
		doc.Splits[0].Images[1].ImageID != idB || strings.Join(doc.Splits[0].Images[1].Nodes, ",") != "n2" {
		t.Fatalf("image_splits: %s", b)
	}
	if len(doc.Nodes) != 5 || doc.Nodes[1].ImageID != idB || doc.Nodes[3].ImageID != "" {
		t.Fatalf("nodes[].image_id: %+v", doc.Nodes)
	}
	var out bytes.Buffer
	if err := printTable(&out, s); err != nil {
		t.Fatal(err)
	}
	want := "SHA abababababab runs different images (one tag, different content; name the image by digest, name@sha256:..., in the spec): " +
		"sha256:111111111111 on n1, n3; sha256:222222222222 on n2\n"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("table lacks %q:\n%s", want, out.String())
	}
	s = newStatusJSON(&coordinator.GroupState{Group: "web", Desired: gs.Desired, Nodes: nodes[3:]}, statusOptions{LostAfter: time.Hour}, now)
	if len(s.ImageSplits) != 0 {
		t.Fatalf("splits where nodes agree: %+v", s.ImageSplits)
	}
}
