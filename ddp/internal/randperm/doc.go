// Package randperm is torch.randperm with a seeded generator, bit for
// bit (Mersenne Twister 19937, as torch's CPU generator): the epoch order
// of ddp's samplers matches torch's DistributedSampler. It knows nothing
// of replicas or datasets.
package randperm
