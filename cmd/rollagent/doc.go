// Command rollagent is the CLI: kong commands wired to the packages that do
// the work. It holds no logic of its own beyond parsing and printing.
package main
