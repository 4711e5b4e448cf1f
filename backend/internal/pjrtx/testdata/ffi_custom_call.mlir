module @golden {
  func.func @main(%x: tensor<2x8x8x4xf32>, %w: tensor<3x3x4x16xf32>) -> tensor<2x8x8x16xf32> {
    %0 = "stablehlo.custom_call"(%x, %w) {
      api_version = 4 : i32,
      backend_config = {pad_hi = array<i64: 1, 1>, pad_lo = array<i64: 1, 1>, stride = array<i64: 1, 1>},
      call_target_name = "xladdp_onednn_conv_forward"
    } : (tensor<2x8x8x4xf32>, tensor<3x3x4x16xf32>) -> tensor<2x8x8x16xf32>
    "stablehlo.return"(%0) : (tensor<2x8x8x16xf32>) -> ()
  }
}
