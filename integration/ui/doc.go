// Package ui checks rollagent's view in the Consul UI with a real browser: a
// Consul dev agent serves its UI, three agents are stopped mid-rollout, and a
// headless Chromium (Debian's chromium, driven by chromedp) loads the
// Services and Key/Value pages and checks what they show. The screenshots
// in docs/ come from this test (ROLLAGENT_UPDATE_SCREENSHOTS=1).
package ui
