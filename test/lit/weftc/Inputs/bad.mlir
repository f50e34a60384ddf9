func.func @f() {
  %0 = weft.param "w" init(zeros) : tensor<?xf32>
  return
}
