package org.tpurt;

/** Status code 8 (TensorFlow's ResourceExhaustedError). */
public class ResourceExhaustedError extends OpError {
  public ResourceExhaustedError(String message) {
    super(8, message);
  }
}
