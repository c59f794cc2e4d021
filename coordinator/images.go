package coordinator

import "sort"

// ImageSplit is one SHA that nodes run from different images: the SHA
// covers the image's name, not its content, and a tag (":latest") already
// present on a node is not pulled again, so nodes can run different code
// under one SHA.
type ImageSplit struct {
	SHA string
	// Images maps each image ID to the nodes that run it, sorted.
	Images map[string][]string
}

// ImageSplits finds the SHAs whose nodes publish more than one image ID,
// sorted by SHA. Nodes that publish none (the exec runtime, an agent of an
// older version) are left out.
func ImageSplits(nodes []NodeState) []ImageSplit {
	by := map[string]map[string][]string{}
	for _, n := range nodes {
		if n.SHA == "" || n.ImageID == "" {
			continue
		}
		if by[n.SHA] == nil {
			by[n.SHA] = map[string][]string{}
		}
		by[n.SHA][n.ImageID] = append(by[n.SHA][n.ImageID], n.Node)
	}
	var out []ImageSplit
	for sha, images := range by {
		if len(images) < 2 {
			continue
		}
		for _, ns := range images {
			sort.Strings(ns)
		}
		out = append(out, ImageSplit{SHA: sha, Images: images})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SHA < out[j].SHA })
	return out
}
