package wire

// MaxPieceBytes is the largest tensor payload Shoal puts in one message
// (1 MiB); larger transfers are streamed in pieces of at most this.
const MaxPieceBytes = 1 << 20

// MaxMessageBytes is the largest message a Shoal peer accepts: one piece
// of MaxPieceBytes plus 64 KiB of room for the fields around it.
const MaxMessageBytes = MaxPieceBytes + 64<<10
