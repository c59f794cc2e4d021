package hashspec

import (
	"strings"
	"testing"
)

func TestValidateBlocks(t *testing.T) {
	on := func(bs ...Block) func(s *Spec) { return func(s *Spec) { s.Update.BlockOn = bs } }
	onNode := func(bs ...Block) func(s *Spec) { return func(s *Spec) { s.Update.BlockOnNode = bs } }
	runValidateCases(t, []validateCase{
		{"neither", on(Block{}), "update.block_on[0]"},
		{"both", on(Block{Service: "db", Check: "disk"}), "update.block_on[0]"},
		{"tag without service", on(Block{Check: "disk", Tag: "primary"}), "update.block_on[0].tag"},
		{"tag alone", on(Block{Tag: "primary"}), "update.block_on[0]"},
		{"control character", on(Block{Check: "disk\n"}), "update.block_on[0].check"},
		{"surrounding space", on(Block{Service: " db"}), "update.block_on[0].service"},
		{"too long", on(Block{Service: "db", Tag: strings.Repeat("t", MaxBlockNameLen+1)}), "update.block_on[0].tag"},
		{"not UTF-8", on(Block{Check: "\xff"}), "update.block_on[0].check"},
		{"second bad", on(Block{Check: "ok"}, Block{}), "update.block_on[1]"},
		{"node neither", onNode(Block{}), "update.block_on_node[0]"},
		{"node both", onNode(Block{Service: "db", Check: "x"}), "update.block_on_node[0]"},
		{"node tag without service", onNode(Block{Check: "disk", Tag: "a"}), "update.block_on_node[0].tag"},
	})
	s := validSpec()
	s.Update.BlockOn = []Block{{Service: "db", Tag: "primary"}, {Check: "Service 'web' check"}, {Service: "web"}}
	s.Update.BlockOnNode = []Block{{Check: "disk"}, {Service: "postgres"}}
	if err := s.Validate(); err != nil {
		t.Errorf("good blocks: %v", err)
	}
}

// Blocks that mean the same share a SHA; ones that differ do not.
func TestBlocksCanonical(t *testing.T) {
	base := func(on, node []Block) *Spec {
		return &Spec{Container: Container{Image: "demo:v1"}, Update: Update{BlockOn: on, BlockOnNode: node}}
	}
	db := Block{Service: "db", Tag: "primary"}
	lag := Block{Check: "replication-lag"}
	disk := Block{Check: "disk"}
	runSHACases(t, []shaCase{
		{"any order", base([]Block{db, lag}, nil), base([]Block{lag, db}, nil), true},
		{"a block twice", base([]Block{db, db, lag}, []Block{disk, disk}), base([]Block{lag, db}, []Block{disk}), true},
		{"empty is none", base([]Block{}, []Block{}), base(nil, nil), true},
		{"a block is not none", base([]Block{db}, nil), base(nil, nil), false},
		{"cluster is not node", base([]Block{disk}, nil), base(nil, []Block{disk}), false},
		{"a tag is not none", base([]Block{db}, nil), base([]Block{{Service: "db"}}, nil), false},
	})
}

// A block's errors name the field and its line, in both formats, and a
// misspelt attribute is an error.
func TestBlockParseErrors(t *testing.T) {
	hcl := "container {\n  image = \"x\"\n}\nupdate {\n  block_on {\n    service = \"db\"\n  }\n  block_on {\n    service = \"db\"\n    check = \"lag\"\n  }\n}\n"
	_, _, err := Load([]byte(hcl), FormatHCL, "g.hcl")
	if err == nil || !strings.Contains(err.Error(), "update.block_on[1]") {
		t.Errorf("HCL: want the second block named, got %v", err)
	}
	_, _, err = Load([]byte(strings.Replace(hcl, "check =", "chek =", 1)), FormatHCL, "g.hcl")
	if err == nil || !strings.Contains(err.Error(), "g.hcl:10") || !strings.Contains(err.Error(), "update.block_on[1].chek") {
		t.Errorf("HCL: want the unknown field at line 10, got %v", err)
	}
	js := "{\"container\": {\"image\": \"x\"},\n \"update\": {\"block_on_node\": [\n  {\"check\": \"disk\", \"tag\": \"a\"}\n]}}\n"
	_, _, err = Load([]byte(js), FormatJSON, "g.json")
	if err == nil || !strings.Contains(err.Error(), "update.block_on_node[0].tag") {
		t.Errorf("JSON: want the tag named, got %v", err)
	}
	_, _, err = Load([]byte(strings.Replace(js, `"tag"`, `"tags"`, 1)), FormatJSON, "g.json")
	if err == nil || !strings.Contains(err.Error(), "tags") {
		t.Errorf("JSON: want the unknown field named, got %v", err)
	}
	if _, _, err := Load([]byte(strings.Replace(js, `, "tag": "a"`, "", 1)), FormatJSON, "g.json"); err != nil {
		t.Errorf("JSON: a good block: %v", err)
	}
}
