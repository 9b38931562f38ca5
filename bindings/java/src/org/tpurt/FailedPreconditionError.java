package org.tpurt;

/** Status code 9 (TensorFlow's FailedPreconditionError). */
public class FailedPreconditionError extends OpError {
  public FailedPreconditionError(String message) {
    super(9, message);
  }
}
