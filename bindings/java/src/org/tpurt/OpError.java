package org.tpurt;

/** A failing tpurt call, named after TensorFlow's errors: code() is the tpu_status, getMessage() the library's message. */
public class OpError extends RuntimeException {
  private final int code;

  protected OpError(int code, String message) {
    super(message);
    this.code = code;
  }

  /** The status code (TensorFlow's numbers). */
  public int code() {
    return code;
  }

  /** The status as the enum. */
  public Status status() {
    return Status.swigToEnum(code);
  }

  /** The typed error for a status code (UnknownError for codes outside 1..16). */
  public static OpError of(int code, String message) {
    switch (code) {
      case 1: return new CancelledError(message);
      case 3: return new InvalidArgumentError(message);
      case 4: return new DeadlineExceededError(message);
      case 5: return new NotFoundError(message);
      case 6: return new AlreadyExistsError(message);
      case 7: return new PermissionDeniedError(message);
      case 8: return new ResourceExhaustedError(message);
      case 9: return new FailedPreconditionError(message);
      case 10: return new AbortedError(message);
      case 11: return new OutOfRangeError(message);
      case 12: return new UnimplementedError(message);
      case 13: return new InternalError(message);
      case 14: return new UnavailableError(message);
      case 15: return new DataLossError(message);
      case 16: return new UnauthenticatedError(message);
      default: return new UnknownError(message);
    }
  }
}
