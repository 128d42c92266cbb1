// A small training program as a burn 0.22 user writes it: a model, Adam, a loop. It reads the
// device's pools after every step with burn's own `memory_pool_usage`: on a GPU these are the
// GPU's bytes; run dry (the patch line in Cargo.toml), the same bytes, computed on CPU.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Distribution, Int, Tensor};

#[derive(Module, Debug)]
struct Classifier {
    hidden: Linear,
    relu: Relu,
    head: Linear,
}

impl Classifier {
    fn new(inputs: usize, width: usize, classes: usize, device: &Device) -> Self {
        Classifier {
            hidden: LinearConfig::new(inputs, width).init(device),
            relu: Relu::new(),
            head: LinearConfig::new(width, classes).init(device),
        }
    }

    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.head.forward(self.relu.forward(self.hidden.forward(x)))
    }
}

fn main() {
    // Sizes from the command line, so one binary answers for several: batch, width.
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let batch = args.next().unwrap_or(512);
    let width = args.next().unwrap_or(4096);
    let (inputs, classes, steps) = (1024, 1000, 3);

    let device = Device::cuda(0).autodiff();
    let mut model = Classifier::new(inputs, width, classes, &device);
    let mut optimizer = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    println!("step\tin_use_bytes\treserved_bytes");
    for step in 1..=steps {
        let x = Tensor::<2>::random([batch, inputs], Distribution::Normal(0.0, 1.0), &device);
        let y = Tensor::<1, Int>::random([batch], Distribution::Uniform(0.0, classes as f64), &device);
        let loss = loss_fn.forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(1e-4, model, grads);
        device.sync().expect("the step ran");
        let usage = device.memory_pool_usage().expect("CubeCL reports its pools");
        println!("{step}\t{}\t{}", usage.bytes_in_use, usage.bytes_reserved);
    }
}
