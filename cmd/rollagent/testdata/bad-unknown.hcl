container {
  image = "x:1"
  nope = 1
}
