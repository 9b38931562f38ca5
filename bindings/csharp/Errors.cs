// Typed errors named after TensorFlow's: every failing native call raises the OpError
// subclass for its status code (set as SWIG's pending exception by TpurtExceptionHelper).
using System;

namespace Tpurt {

public class OpError : Exception {
  public Status Code { get; }
  public OpError(Status code, string message) : base(message) { Code = code; }

  // The typed error for a status code; codes without a class become UnknownError.
  public static OpError FromCode(Status code, string message) {
    switch (code) {
      case Status.Cancelled: return new CancelledError(message);
      case Status.InvalidArgument: return new InvalidArgumentError(message);
      case Status.DeadlineExceeded: return new DeadlineExceededError(message);
      case Status.NotFound: return new NotFoundError(message);
      case Status.AlreadyExists: return new AlreadyExistsError(message);
      case Status.PermissionDenied: return new PermissionDeniedError(message);
      case Status.ResourceExhausted: return new ResourceExhaustedError(message);
      case Status.FailedPrecondition: return new FailedPreconditionError(message);
      case Status.Aborted: return new AbortedError(message);
      case Status.OutOfRange: return new OutOfRangeError(message);
      case Status.Unimplemented: return new UnimplementedError(message);
      case Status.Internal: return new InternalError(message);
      case Status.Unavailable: return new UnavailableError(message);
      case Status.DataLoss: return new DataLossError(message);
      case Status.Unauthenticated: return new UnauthenticatedError(message);
      default: return new UnknownError(message);
    }
  }
}

public class CancelledError : OpError { public CancelledError(string m) : base(Status.Cancelled, m) {} }
public class UnknownError : OpError { public UnknownError(string m) : base(Status.Unknown, m) {} }
public class InvalidArgumentError : OpError { public InvalidArgumentError(string m) : base(Status.InvalidArgument, m) {} }
public class DeadlineExceededError : OpError { public DeadlineExceededError(string m) : base(Status.DeadlineExceeded, m) {} }
public class NotFoundError : OpError { public NotFoundError(string m) : base(Status.NotFound, m) {} }
public class AlreadyExistsError : OpError { public AlreadyExistsError(string m) : base(Status.AlreadyExists, m) {} }
public class PermissionDeniedError : OpError { public PermissionDeniedError(string m) : base(Status.PermissionDenied, m) {} }
public class ResourceExhaustedError : OpError { public ResourceExhaustedError(string m) : base(Status.ResourceExhausted, m) {} }
public class FailedPreconditionError : OpError { public FailedPreconditionError(string m) : base(Status.FailedPrecondition, m) {} }
public class AbortedError : OpError { public AbortedError(string m) : base(Status.Aborted, m) {} }
public class OutOfRangeError : OpError { public OutOfRangeError(string m) : base(Status.OutOfRange, m) {} }
public class UnimplementedError : OpError { public UnimplementedError(string m) : base(Status.Unimplemented, m) {} }
public class InternalError : OpError { public InternalError(string m) : base(Status.Internal, m) {} }
public class UnavailableError : OpError { public UnavailableError(string m) : base(Status.Unavailable, m) {} }
public class DataLossError : OpError { public DataLossError(string m) : base(Status.DataLoss, m) {} }
public class UnauthenticatedError : OpError { public UnauthenticatedError(string m) : base(Status.Unauthenticated, m) {} }

}
