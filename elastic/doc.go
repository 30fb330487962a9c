// Package elastic is ring-allreduce training that survives members that
// die and takes in members that join, in the manner of Horovod elastic
// and torchrun's rendezvous, with membership from gossip.
//
// Every member serves the Elastic service (Coordinator; Serve serves it
// and reports what ended serving); the live member
// with the lowest id coordinates. When the ring breaks (a peer died: a
// collective fails) or a member asks to join (rank 0 sees it waiting and
// every rank stops at the same step boundary), every member asks the
// coordinator for a new generation. The round closes once every member
// the roster holds alive has asked; the members are renumbered densely in
// id order, connect a new ring, and take up the weights, optimizer state
// and data position of the lowest rank that trained in the latest
// generation (the root). A step is applied only where its allreduce
// completed, so the root's state is a whole number of steps: no rank goes
// on from a half-done step. The rest of an epoch that a change split is
// shared among the new world (data.Remaining): no sample is seen twice or
// skipped within an epoch beyond the sampler's padding.
package elastic
