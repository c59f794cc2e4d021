container {
  image = "nginx:1.27"
}
